package main

import (
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"
)

// newEdgeReEnrollCommand builds `edge re-enroll edge-router|authenticator`: new enrollments
// for a router or an identity's authenticator whose certificate is lost, compromised or
// expired. The old credential stops working at once.
func newEdgeReEnrollCommand(f *edgeFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "re-enroll edge-router|authenticator",
		Short: "Replace an edge router's certificates or an authenticator with a new enrollment",
	}
	var routerJWT string
	router := &cobra.Command{
		Use:     "edge-router NAME|ID",
		Aliases: []string{"er"},
		Short:   "Drop an edge router's certificates and give it a new enrollment token",
		Long: "Drop the certificates of an edge router (it is disconnected at once) and give it a new\n" +
			"enrollment token, for `zmesh router enroll`. The token is printed alone on stdout, or\n" +
			"written to --jwt-output-file.",
		Args:              argCount(1, 1),
		ValidArgsFunction: f.completeNames("edge-routers"),
		RunE: func(cmd *cobra.Command, pos []string) error {
			e, err := f.call(cmd)
			if err != nil {
				return err
			}
			id, err := e.resolve("edge-routers", pos[0])
			if err != nil {
				return err
			}
			path := "/edge-routers/" + url.PathEscape(id)
			if _, err := e.do("POST", path+"/re-enroll", map[string]any{}, nil); err != nil {
				return err
			}
			var detail map[string]any
			if _, err := e.do("GET", path, nil, &detail); err != nil {
				return fmt.Errorf("re-enrolled edge router %s (%s), but reading it back failed: %w", pos[0], id, err)
			}
			return e.handOut(fmt.Sprintf("re-enrolled edge router %s (%s)", pos[0], id),
				&enrollment{toStdout: true, jwt: jwtField("enrollmentJwt")}, routerJWT, detail)
		},
	}
	router.Flags().StringVar(&routerJWT, "jwt-output-file", "", "write the enrollment token to this file (mode 0600)")

	var authJWT string
	var valid time.Duration
	auth := &cobra.Command{
		Use:   "authenticator ID",
		Short: "Replace an identity's authenticator with a one-time enrollment of its kind",
		Long: "Delete an authenticator (its certificate or password stops working at once) and give its\n" +
			"identity an enrollment of the same kind, valid for --duration. A certificate\n" +
			"authenticator's one-time token is printed alone on stdout, or written to\n" +
			"--jwt-output-file.",
		Args:              argCount(1, 1),
		ValidArgsFunction: f.completeNames("authenticators"),
		RunE: func(cmd *cobra.Command, pos []string) error {
			if valid <= 0 {
				return usagef("--duration %s is not allowed; allowed: a positive duration, e.g. 24h", valid)
			}
			e, err := f.call(cmd)
			if err != nil {
				return err
			}
			var created struct {
				ID string `json:"id"`
			}
			body := map[string]string{"expiresAt": time.Now().Add(valid).UTC().Format(time.RFC3339)}
			if _, err := e.do("POST", "/authenticators/"+url.PathEscape(pos[0])+"/re-enroll", body, &created); err != nil {
				return err
			}
			var detail map[string]any
			if _, err := e.do("GET", "/enrollments/"+url.PathEscape(created.ID), nil, &detail); err != nil {
				return fmt.Errorf("replaced authenticator %s by enrollment %s, but reading it back failed: %w", pos[0], created.ID, err)
			}
			var en *enrollment
			if tok, _ := detail["jwt"].(string); tok != "" {
				en = &enrollment{toStdout: true, jwt: jwtField("jwt")}
			}
			msg := fmt.Sprintf("replaced authenticator %s by enrollment %s (method %v), valid until %v", pos[0], created.ID, detail["method"], detail["expiresAt"])
			return e.handOut(msg, en, authJWT, detail)
		},
	}
	auth.Flags().StringVar(&authJWT, "jwt-output-file", "", "write the enrollment token to this file (mode 0600)")
	auth.Flags().DurationVar(&valid, "duration", 24*time.Hour, "how long the new enrollment stays valid")
	cmd.AddCommand(router, auth)
	return cmd
}

// jwtField returns the enrollment token found in a detail's field.
func jwtField(name string) func(map[string]any) string {
	return func(d map[string]any) string { s, _ := d[name].(string); return s }
}
