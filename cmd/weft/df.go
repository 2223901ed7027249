package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real subcommand.
func newDfCmd() *cobra.Command {
	return &cobra.Command{Use: "df", RunE: func(*cobra.Command, []string) error { return errors.New("df: not built yet") }}
}
