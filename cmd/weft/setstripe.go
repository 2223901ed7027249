package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real subcommand.
func newSetstripeCmd() *cobra.Command {
	return &cobra.Command{Use: "setstripe", RunE: func(*cobra.Command, []string) error { return errors.New("setstripe: not built yet") }}
}
