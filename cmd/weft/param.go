package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/metarpc"
)

// leveledLogger is logOptions.logger whose level can change at run time
// (parameter log.level.*): it returns the level variable and the level
// --log-level asked for.
func (l *logOptions) leveledLogger(w io.Writer) (*slog.Logger, *slog.LevelVar, slog.Level) {
	level, _ := parseLevel(l.LogLevel)
	v := new(slog.LevelVar)
	v.Set(level)
	ho := &slog.HandlerOptions{Level: v}
	if l.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho)), v, level
	}
	return slog.New(slog.NewTextHandler(w, ho)), v, level
}

type paramOptions struct {
	meta    string
	keys    string
	timeout time.Duration
	persist bool
	json    bool
}

func newParamCmd() *cobra.Command {
	o := &paramOptions{}
	cmd := &cobra.Command{
		Use:   "param list|get NAME|set NAME=VALUE [--persist]",
		Short: "Show and change run-time parameters (like lctl get_param / set_param)",
		Long: `Show and change the run-time parameters the metadata service keeps for the
whole file system: read-ahead, write-behind, RPCs in flight and checksums of
the mounts, the storage servers' rebuild rate, each daemon's log level. See
docs/params.md for every parameter, its default and what applies it.

A value set takes effect without a restart; it lasts until the metadata
server restarts, or, with --persist, is kept in the metadata store
(replicated with it). Setting needs root on a client host or a server's
key bundle; anyone may read.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.meta, "meta", "", "host:port of the metadata server (or the members of a replicated group)")
	pf.StringVar(&o.keys, "keys", defaultKeys, "directory of a key bundle of this cluster (weft keygen)")
	pf.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up after this long")

	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "Show every parameter: value, where it comes from, default, scope",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, func(ctx context.Context, c *metarpc.Client) error {
				ps, err := c.Params(ctx)
				if err != nil {
					return err
				}
				if o.json {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(ps)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 8, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tVALUE\tSOURCE\tDEFAULT\tSCOPE")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, quoteEmpty(p.Value), p.Source, quoteEmpty(p.Default), p.Scope)
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().BoolVar(&o.json, "json", false, "print JSON")

	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Print one parameter's value",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, ok := meta.ParamDefOf(args[0]); !ok {
				return fmt.Errorf("no parameter %q (weft param list)", args[0])
			}
			return o.run(cmd, func(ctx context.Context, c *metarpc.Client) error {
				ps, err := c.Params(ctx)
				if err != nil {
					return err
				}
				for _, p := range ps {
					if p.Name == args[0] {
						_, err := fmt.Fprintln(cmd.OutOrStdout(), p.Value)
						return err
					}
				}
				return fmt.Errorf("the metadata service does not know parameter %q (an older version?)", args[0])
			})
		},
	}

	set := &cobra.Command{
		Use:   "set NAME=VALUE [--persist]",
		Short: "Set a parameter now (and across restarts with --persist)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, value, ok := strings.Cut(args[0], "=")
			if !ok {
				return fmt.Errorf("%q: want NAME=VALUE", args[0])
			}
			if _, err := meta.CheckParam(name, value); err != nil {
				return err // before asking anyone
			}
			return o.run(cmd, func(ctx context.Context, c *metarpc.Client) error {
				return c.SetParam(ctx, name, value, o.persist)
			})
		},
	}
	set.Flags().BoolVar(&o.persist, "persist", false, "keep the value in the metadata store, across restarts")
	cmd.AddCommand(list, get, set)
	return cmd
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

func (o *paramOptions) run(cmd *cobra.Command, f func(ctx context.Context, c *metarpc.Client) error) error {
	return withMetaAdmin(cmd.Context(), o.meta, o.keys, o.timeout, func(ctx context.Context, c *metarpc.Client) error {
		if err := f(ctx, c); err != nil {
			return fmt.Errorf("param: %s: %w", o.meta, err)
		}
		return nil
	})
}
