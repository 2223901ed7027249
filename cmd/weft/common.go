package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/internal/config"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/transport"
)

// logOptions are the logging settings shared by the long-running commands.
// They live in each command's options struct (embedded), so a config file
// can set them too.
type logOptions struct {
	LogLevel  string `toml:"log_level"`
	LogFormat string `toml:"log_format"`
}

func (l *logOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&l.LogLevel, "log-level", "warn", "log level: debug, info, warn or error (logs go to stderr)")
	fs.StringVar(&l.LogFormat, "log-format", "text", "log format: text or json")
}

func (l *logOptions) validate() error {
	if _, err := parseLevel(l.LogLevel); err != nil {
		return err
	}
	switch l.LogFormat {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("--log-format %q: want text or json", l.LogFormat)
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
}

// logger builds the slog.Logger for a command; call validate first.
func (l *logOptions) logger(w io.Writer) *slog.Logger {
	level, _ := parseLevel(l.LogLevel)
	ho := &slog.HandlerOptions{Level: level}
	if l.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// explainConfig rewrites err, an error of resolving a command's options,
// so that a value that came from the --config file is named as the file's
// key rather than as a flag the user never gave.
func explainConfig(cmd *cobra.Command, path string, opts any, err error) error {
	return config.Explain(err, path, config.FromFile(path, cmd.Flags(), opts))
}

// loadConfig applies the --config file (if any) to opts: keys in the file
// override flag defaults, flags given on the command line override the file.
func loadConfig(cmd *cobra.Command, path string, opts any) error {
	if path == "" {
		return nil
	}
	if err := config.Load(path, cmd.Flags(), opts); err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	return nil
}

// keyList names the config-file keys of an options struct, for help texts.
func keyList(opts any) string { return strings.Join(config.Keys(opts), ", ") }

// checkAddr validates a host:port flag. A listen address may leave the host
// empty (all interfaces) and use port 0 (any free port); an address that
// others dial may not.
func checkAddr(flag, addr string, listen bool) error {
	if addr == "" {
		return fmt.Errorf("--%s is required (host:port, e.g. 10.0.0.1:7400)", flag)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: %v (want host:port, e.g. 10.0.0.1:7400)", flag, addr, unwrapAddrErr(err))
	}
	if host == "" && !listen {
		return fmt.Errorf("--%s %q: missing host (want host:port, e.g. 10.0.0.1:7400)", flag, addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && !listen) {
		return fmt.Errorf("--%s %q: bad port %q (want 1-65535)", flag, addr, port)
	}
	return nil
}

// checkAddrList validates a flag that takes one address or a
// comma-separated list (the members of a replicated metadata group).
func checkAddrList(flag, list string) error {
	if strings.TrimSpace(list) == "" {
		return checkAddr(flag, "", false)
	}
	for _, a := range strings.Split(list, ",") {
		if err := checkAddr(flag, strings.TrimSpace(a), false); err != nil {
			return err
		}
	}
	return nil
}

func unwrapAddrErr(err error) string {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return ae.Err
	}
	return err.Error()
}

// isUnspecifiedHost reports whether a listen address binds every interface
// (":7410", "0.0.0.0:7410", "[::]:7410"), which peers cannot dial.
func isUnspecifiedHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// checkExistingDir fails unless path names an existing directory. Server
// data directories are never created implicitly: a typo must not start an
// empty metadata database or register an empty storage target.
func checkExistingDir(flag, path string) error {
	if path == "" {
		return fmt.Errorf("--%s is required", flag)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--%s %s: directory does not exist (create it with: mkdir -p %s)", flag, path, path)
	case isStaleMount(err):
		return fmt.Errorf("--%s %s: stale FUSE mount (clean it with: fusermount3 -u %s)", flag, path, path)
	case err != nil:
		return fmt.Errorf("--%s: %w", flag, err)
	case !fi.IsDir():
		return fmt.Errorf("--%s %s: not a directory", flag, path)
	}
	return nil
}

// signalContext is cancelled by SIGINT or SIGTERM: the servers and the mount
// then shut down cleanly and the command exits 0.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// isStaleMount reports whether err comes from a FUSE mount whose daemon is
// gone: the kernel answers ENOTCONN ("transport endpoint is not connected").
func isStaleMount(err error) bool { return errors.Is(err, syscall.ENOTCONN) }

// adminPool loads the key bundle in dir (of any role) and returns a pool of
// authenticated connections for an admin tool (status, find); the caller
// closes it.
func adminPool(dir string) (*transport.Pool, error) {
	keys, err := auth.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("--keys %s: %w", dir, err)
	}
	return transport.NewPool(transport.NewTCPWith(transport.TCPOptions{Security: keys.Security(false)}), transport.PoolOptions{}), nil
}

// withMetaAdmin runs f with a client of the metadata service at meta (one
// address, or the members of a group: the client finds the leader),
// authenticated with the key bundle in keysDir, under timeout: what the
// admin commands (target, param, jobstats) share.
func withMetaAdmin(ctx context.Context, meta, keysDir string, timeout time.Duration, f func(context.Context, *metarpc.Client) error) error {
	if meta == "" {
		return errors.New("--meta is required: the metadata server's host:port (e.g. --meta 10.0.0.1:7400)")
	}
	if err := checkAddrList("meta", meta); err != nil {
		return err
	}
	pool, err := adminPool(keysDir)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx, metarpc.NewClient(pool, meta))
}
