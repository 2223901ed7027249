package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/auth"
)

func newKeygenCmd() *cobra.Command {
	var caDir, role, name, out string
	cmd := &cobra.Command{
		Use:   "keygen --out DIR | keygen --ca CADIR --role ROLE --name NAME --out DIR",
		Short: "Make the keys that authenticate weft processes to each other",
		Long: `Make keys. Without --ca, make a whole cluster key set in DIR: the cluster
CA in DIR/ca (keep DIR/ca/ca.key off the cluster's machines) and one bundle
per role, DIR/meta, DIR/storage and DIR/client, for --keys of weft meta,
weft storage and weft mount.

With --ca, issue one more bundle signed by the CA in CADIR, for a node with
--role client, storage or meta and --name (its host name, say), in DIR.

Existing keys are never overwritten. See docs/security.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runKeygen(cmd.OutOrStdout(), caDir, role, name, out)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&out, "out", "", "directory to write the cluster key set (or, with --ca, the bundle) into")
	fs.StringVar(&caDir, "ca", "", "CA directory (DIR/ca of a cluster key set) to issue one bundle with")
	fs.StringVar(&role, "role", "", "with --ca: role of the new bundle: client, storage or meta")
	fs.StringVar(&name, "name", "", "with --ca: name of the node (e.g. its host name), shown in servers' logs")
	return cmd
}

func runKeygen(w io.Writer, caDir, role, name, out string) error {
	if out == "" {
		return errors.New("keygen: --out DIR is required")
	}
	if caDir == "" {
		if role != "" || name != "" {
			return errors.New("keygen: --role and --name issue one bundle and need --ca CADIR")
		}
		if err := auth.GenerateCluster(out); err != nil {
			return fmt.Errorf("keygen: %w", err)
		}
		fmt.Fprintf(w, `made a cluster key set in %s:
  %s  the CA; keep ca.key off the cluster's machines
  %s  --keys of weft meta
  %s  --keys of weft storage
  %s  --keys of weft mount
`, out, filepath.Join(out, auth.ClusterCADir), filepath.Join(out, auth.ClusterMetaDir),
			filepath.Join(out, auth.ClusterStorageDir), filepath.Join(out, auth.ClusterClientDir))
		return nil
	}
	r, err := auth.ParseRole(role)
	if err != nil {
		return fmt.Errorf("keygen: --role: %w", err)
	}
	if name == "" {
		return errors.New("keygen: --name is required with --ca (the node's host name, say)")
	}
	if err := auth.Issue(caDir, r, name, out); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	fmt.Fprintf(w, "made a %s bundle for %q in %s\n", r, name, out)
	return nil
}
