package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real subcommand.
func newGetstripeCmd() *cobra.Command {
	return &cobra.Command{Use: "getstripe", RunE: func(*cobra.Command, []string) error { return errors.New("getstripe: not built yet") }}
}
