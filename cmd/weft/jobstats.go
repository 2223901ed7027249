package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
)

// jobstatsOptions bound the per-job statistics a server keeps (weft meta,
// weft storage).
type jobstatsOptions struct {
	JobstatsCleanup units.Duration `toml:"jobstats_cleanup"`
	JobstatsMax     int            `toml:"jobstats_max"`
}

func (o *jobstatsOptions) addFlags(fs *pflag.FlagSet) {
	o.JobstatsCleanup = units.Duration(jobstats.DefaultIdle)
	fs.Var(&o.JobstatsCleanup, "jobstats-cleanup", "forget a job's statistics (weft jobstats, weft_job_* metrics) when it sent no request for this long")
	fs.IntVar(&o.JobstatsMax, "jobstats-max", jobstats.DefaultMax, "keep the statistics of at most this many jobs (the least recently seen is forgotten first)")
}

func (o *jobstatsOptions) validate() error {
	if o.JobstatsCleanup <= 0 {
		return errors.New("--jobstats-cleanup must be positive")
	}
	if o.JobstatsMax <= 0 {
		return errors.New("--jobstats-max must be positive")
	}
	return nil
}

func (o *jobstatsOptions) options(service string) jobstats.Options {
	return jobstats.Options{Service: service, Idle: time.Duration(o.JobstatsCleanup), Max: o.JobstatsMax}
}

// registerJobs adds t to the daemon's metrics (when --metrics is on).
func (d *daemon) registerJobs(t *jobstats.Table) {
	if d.registry == nil || t == nil {
		return
	}
	if err := d.registry.Register(t); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if !errors.As(err, &dup) {
			d.log.Warn("jobstats: cannot export job metrics", "err", err)
		}
	}
}

type jobstatsCmdOptions struct {
	Meta    string
	Keys    string
	Job     string
	Timeout time.Duration
	JSON    bool
}

func newJobstatsCmd() *cobra.Command {
	o := &jobstatsCmdOptions{}
	cmd := &cobra.Command{
		Use:   "jobstats --meta ADDR [--job ID] [--json]",
		Short: "Show per-job statistics: operations, bytes and latency of each job, per server",
		Long: `Ask the metadata service for the statistics it keeps per job, and those of
every storage server that is up (the metadata service asks them): for each
job and server, the requests by operation (and how many failed), the data
bytes read and written (storage servers), the requests' total and mean
latency, and when the job was last seen.

Mounts tag requests with a job id taken from an environment variable of
the calling process (weft mount --jobid-var, default SLURM_JOB_ID) or
procname_uid; see docs/jobstats.md. A job not seen for --jobstats-cleanup
(a server flag, default 10m) is forgotten.

It needs a key bundle of the cluster, used as root on a client host or a
server's bundle on a server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := proto.ValidJobID(o.Job); err != nil {
				return fmt.Errorf("--job: %w", err)
			}
			return withMetaAdmin(cmd.Context(), o.Meta, o.Keys, o.Timeout, func(ctx context.Context, c *metarpc.Client) error {
				st, err := c.JobStats(ctx, o.Job)
				if err != nil {
					return fmt.Errorf("jobstats of %s: %w", o.Meta, err)
				}
				sortJobStats(st)
				if o.JSON {
					return printJobStatsJSON(cmd.OutOrStdout(), st)
				}
				return printJobStats(cmd.OutOrStdout(), st)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Meta, "meta", "", "host:port of the metadata server")
	fs.StringVar(&o.Keys, "keys", defaultKeys, "directory of a key bundle of this cluster (weft keygen)")
	fs.StringVar(&o.Job, "job", "", "show only this job")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "give up asking after this long")
	fs.BoolVar(&o.JSON, "json", false, "print JSON")
	return cmd
}

func sortJobStats(st []proto.JobStat) {
	slices.SortFunc(st, func(a, b proto.JobStat) int {
		return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.Service, b.Service), cmp.Compare(a.Server, b.Server))
	})
}

// jobStatJSON is one line of `weft jobstats --json`.
type jobStatJSON struct {
	Job        string            `json:"job"`
	Service    string            `json:"service"`
	Server     string            `json:"server"`
	Ops        map[string]uint64 `json:"ops"`
	Errors     map[string]uint64 `json:"errors,omitempty"`
	ReadBytes  uint64            `json:"read_bytes"`
	WriteBytes uint64            `json:"write_bytes"`
	Requests   uint64            `json:"requests"`
	LatencySec float64           `json:"latency_sum_seconds"`
	FirstSeen  time.Time         `json:"first_seen"`
	LastSeen   time.Time         `json:"last_seen"`
}

func printJobStatsJSON(w io.Writer, st []proto.JobStat) error {
	out := make([]jobStatJSON, 0, len(st))
	for _, s := range st {
		j := jobStatJSON{Job: s.Job, Service: s.Service, Server: s.Server, Ops: map[string]uint64{},
			ReadBytes: s.ReadBytes, WriteBytes: s.WriteBytes, Requests: s.Requests,
			LatencySec: s.Latency.Seconds(), FirstSeen: s.FirstSeen.UTC(), LastSeen: s.LastSeen.UTC()}
		for _, op := range s.Ops {
			j.Ops[op.Name] = op.Count
			if op.Errors > 0 {
				if j.Errors == nil {
					j.Errors = map[string]uint64{}
				}
				j.Errors[op.Name] = op.Errors
			}
		}
		out = append(out, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func printJobStats(w io.Writer, st []proto.JobStat) error {
	if len(st) == 0 {
		_, err := fmt.Fprintln(w, "no job statistics (no request named a job within --jobstats-cleanup)")
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSERVER\tREQUESTS\tREAD\tWRITTEN\tMEAN LATENCY\tLAST SEEN\tOPERATIONS")
	now := time.Now()
	for _, s := range st {
		var ops []string
		for _, op := range s.Ops {
			o := fmt.Sprintf("%s=%d", op.Name, op.Count)
			if op.Errors > 0 {
				o += fmt.Sprintf("(%d failed)", op.Errors)
			}
			ops = append(ops, o)
		}
		var mean time.Duration
		if s.Requests > 0 {
			mean = s.Latency / time.Duration(s.Requests)
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%d\t%s\t%s\t%s\t%s ago\t%s\n", s.Job, s.Service, s.Server, s.Requests,
			units.FormatSize(s.ReadBytes), units.FormatSize(s.WriteBytes), mean.Round(time.Microsecond),
			now.Sub(s.LastSeen).Round(time.Second), strings.Join(ops, " "))
	}
	return tw.Flush()
}
