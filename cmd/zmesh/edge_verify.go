package main

import (
	"fmt"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// newEdgeVerifyCommand builds `edge verify ca NAME|ID --cert FILE`: proof that whoever adds
// the CA holds its key.
func newEdgeVerifyCommand(f *edgeFlags) *cobra.Command {
	verb := &cobra.Command{
		Use:   "verify ca NAME|ID --cert FILE",
		Short: "Verify a CA with a certificate its key signed",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("verify needs an entity type; allowed: ca")
			}
			return usagef("%q is not an entity type verify applies to; allowed: ca", args[0])
		},
	}
	var certFile string
	ca := &cobra.Command{
		Use:     "ca NAME|ID --cert FILE",
		Aliases: []string{"cas"},
		Short:   "Verify a CA: FILE is a certificate its key signed whose common name is the CA's verificationToken",
		Long: "Verify a CA with FILE, a PEM certificate signed by the CA's key whose common name is the\n" +
			"CA's verification token (zmesh edge get ca NAME shows it). A verified CA can enroll\n" +
			"identities on its own (--autoca).",
		Args:              argCount(1, 1),
		ValidArgsFunction: f.completeNames("cas"),
		RunE: func(cmd *cobra.Command, pos []string) error {
			pem, err := os.ReadFile(certFile)
			if err != nil {
				return fmt.Errorf("--cert: %w", err)
			}
			e, err := f.call(cmd)
			if err != nil {
				return err
			}
			id, err := e.resolve("cas", pos[0])
			if err != nil {
				return err
			}
			if _, err := e.c.DoBody(cmd.Context(), "POST", apiclient.ManagementAPI+"/cas/"+url.PathEscape(id)+"/verify", "text/plain", pem, nil); err != nil {
				return err
			}
			if f.output == "json" {
				var d map[string]any
				if _, err := e.do("GET", "/cas/"+url.PathEscape(id), nil, &d); err != nil {
					return err
				}
				return printJSON(cmd, d)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "verified CA %s (%s)\n", pos[0], id)
			return err
		},
	}
	ca.Flags().StringVar(&certFile, "cert", "", "PEM file of the verification certificate")
	ca.MarkFlagRequired("cert")
	verb.AddCommand(ca)
	return verb
}
