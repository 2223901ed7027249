package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real subcommand.
func newStorageCmd() *cobra.Command {
	return &cobra.Command{Use: "storage", RunE: func(*cobra.Command, []string) error { return errors.New("storage: not built yet") }}
}
