package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real subcommand.
func newBenchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", RunE: func(*cobra.Command, []string) error { return errors.New("bench: not built yet") }}
}
