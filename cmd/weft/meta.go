package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real subcommand.
func newMetaCmd() *cobra.Command {
	return &cobra.Command{Use: "meta", RunE: func(*cobra.Command, []string) error { return errors.New("meta: not built yet") }}
}
