package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/internal/version"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/transport"
)

// versionJSON is `weft version --json`.
type versionJSON struct {
	version.Info
	Protocol      uint16 `json:"protocol"`
	RequestHeader uint16 `json:"meta_request_header"`
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Show this binary's version and the protocol versions it speaks",
		Long: `Show the release, the source revision this binary was built from, the Go
version, and the wire protocol version (peers of another protocol version
refuse each other with an error naming both). Every command also takes
--version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionJSON{Info: version.Get(), Protocol: transport.ProtocolVersion, RequestHeader: metarpc.HeaderVersion}
			if asJSON {
				b, err := json.Marshal(v)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "weft %s\nprotocol %d (meta request header %d)\n", v.Info, v.Protocol, v.RequestHeader)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// setVersions gives every command a --version flag (cobra adds one only
// where Version is set) that prints the one-line version.
func setVersions(c *cobra.Command) {
	c.Version = version.String()
	c.SetVersionTemplate("weft {{.Version}}\n")
	for _, sub := range c.Commands() {
		setVersions(sub)
	}
}
