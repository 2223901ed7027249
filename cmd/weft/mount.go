package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real subcommand.
func newMountCmd() *cobra.Command {
	return &cobra.Command{Use: "mount", RunE: func(*cobra.Command, []string) error { return errors.New("mount: not built yet") }}
}
