package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real subcommand.
func newUpCmd() *cobra.Command {
	return &cobra.Command{Use: "up", RunE: func(*cobra.Command, []string) error { return errors.New("up: not built yet") }}
}
