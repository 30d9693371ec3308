package main

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// newEdgeLogoutCommand builds `edge logout`: it ends the API session of the profile in use on
// the controller and removes the login from the session file.
func newEdgeLogoutCommand(f *edgeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "End the API session on the controller and forget the login",
		Long: "End the API session of the login in use (--profile NAME, or the current one) on the\n" +
			"controller, then remove that login from the session file. Not being logged in is an\n" +
			"error. When the controller cannot be reached the login is kept, since its session still\n" +
			"holds; a session the controller has already ended is only removed.",
		Args: argCount(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			logins, name, s, err := f.login()
			if err != nil {
				return err
			}
			c, err := f.clientOf(name, s)
			if err != nil {
				return err
			}
			ended := "logged out of"
			if _, err := c.Do(cmd.Context(), "DELETE", apiclient.ManagementAPI+"/current-api-session", nil, nil); err != nil {
				var apiErr *apiclient.Error
				if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
					return fmt.Errorf("logout: the session is kept, as the controller did not end it: %w", err)
				}
				ended = "the controller had already ended the session; removed the login to"
			}
			delete(logins.Profiles, name)
			if logins.Current == name {
				logins.Current = ""
			}
			if err := logins.save(f.sessionFile); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s as %s (profile %s)\n", ended, s.URL, s.Username, name)
			return err
		},
	}
}
