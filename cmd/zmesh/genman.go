package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// genManCommand is the hidden command that writes the man pages; `make install` and
// `make deb` run it on the binary they ship, so the pages describe that binary's commands.
const genManCommand = "gen-man"

// newGenManCommand writes one man page (section 1) per command of the tree into a directory:
// zmesh.1, zmesh-router-run.1, and so on. Hidden commands, this one included, get none. The
// pages' date is SOURCE_DATE_EPOCH's when it is set, for reproducible packages.
func newGenManCommand() *cobra.Command {
	return &cobra.Command{
		Use:    genManCommand + " DIR",
		Short:  "Write the man pages of every command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			header := &doc.GenManHeader{Section: "1", Source: "zmesh " + version, Manual: "zmesh manual"}
			if err := doc.GenManTree(cmd.Root(), header, dir); err != nil {
				return fmt.Errorf("man pages in %s: %w", dir, err)
			}
			return nil
		},
	}
}
