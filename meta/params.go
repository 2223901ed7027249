package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"syscall"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
)

// ParamDef describes one run-time parameter (`weft param`): its name, who
// it tunes, its default, and which values it takes. docs/params.md lists
// them all; TestParamsDocumented keeps the two in step.
type ParamDef struct {
	Name    string
	Scope   string // "mounts", "storage servers", "metadata service"
	Default string
	Doc     string
	// check validates a value and returns it in its canonical form.
	check func(string) (string, error)
}

// Params are the run-time parameters the metadata service keeps.
var Params = []ParamDef{
	{Name: "client.read_ahead", Scope: "mounts", Default: "auto", check: sizeOrAuto,
		Doc: "read-ahead window of each sequentially read file (auto: from the file's layout)"},
	{Name: "client.write_behind", Scope: "mounts", Default: "auto", check: sizeOrAuto,
		Doc: "write-behind buffer limit of a mount (auto: from --cache-limit)"},
	{Name: "client.rpcs_in_flight", Scope: "mounts", Default: "auto", check: countOrAuto,
		Doc: "storage requests in flight per mount and server (auto: the transport's bound)"},
	{Name: "client.checksums", Scope: "mounts", Default: "on", check: readOnly(errChecksumsFixed),
		Doc: "data checksums (read-only: the storage servers keep and verify a CRC32C of every block)"},
	{Name: "meta.file_copies", Scope: "metadata service", Default: "on", check: onOff,
		Doc: "keep a copy of small files' bytes (at most 4 KiB) beside their objects, answered by opens for reading (off: no new copies; those taken stay until their files change); applied at once"},
	{Name: "rebuild.rate", Scope: "metadata service", Default: "0", check: size,
		Doc: "bytes per second the rebuild may copy (0: unlimited; while unset: weft meta --rebuild-rate); applied at once"},
	{Name: "scrub.rate", Scope: "storage servers", Default: "50MiB", check: size,
		Doc: "bytes per second each storage server's scrub reads (0: unlimited)"},
	{Name: "scrub.interval", Scope: "storage servers", Default: "168h", check: duration,
		Doc: "time from the start of one scrub pass of a target to the next (0: only weft scrub --now)"},
	{Name: "log.level.meta", Scope: "metadata service", Default: "", check: logLevel,
		Doc: "log level of the metadata servers (\"\": their --log-level); applied at once"},
	{Name: "log.level.storage", Scope: "storage servers", Default: "", check: logLevel,
		Doc: "log level of the storage servers (\"\": their --log-level)"},
	{Name: "log.level.client", Scope: "mounts", Default: "", check: logLevel,
		Doc: "log level of the mounts (\"\": their --log-level)"},
}

// ParamDefOf returns the definition of name.
func ParamDefOf(name string) (ParamDef, bool) {
	for _, p := range Params {
		if p.Name == name {
			return p, true
		}
	}
	return ParamDef{}, false
}

func sizeOrAuto(v string) (string, error) {
	if v == "auto" {
		return v, nil
	}
	return size(v)
}

func size(v string) (string, error) {
	n, err := units.ParseSize(v)
	if err != nil {
		return "", err
	}
	return units.FormatSize(n), nil
}

func duration(v string) (string, error) {
	d, err := units.ParseDuration(v)
	if err != nil {
		return "", err
	}
	if d < 0 {
		return "", fmt.Errorf("want a duration of 0 or more, not %q", v)
	}
	return d.String(), nil
}

func countOrAuto(v string) (string, error) {
	if v == "auto" {
		return v, nil
	}
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("want auto or a count from 1 to 65535, not %q", v)
	}
	return strconv.FormatUint(n, 10), nil
}

// errChecksumsFixed is why client.checksums cannot be set: the checksums
// are the storage servers' (a CRC32C per 4 KiB block, written with the
// data and verified by every read, storage/sidecar.go); a mount computes
// none it could skip, and turning the servers' off would leave blocks
// without the checksum every later read verifies.
var errChecksumsFixed = errors.New("read-only: the storage servers keep and verify a CRC32C of every block, which cannot be turned off")

// readOnly is the check of a parameter that shows a fixed value and takes
// none.
func readOnly(why error) func(string) (string, error) {
	return func(string) (string, error) { return "", why }
}

func onOff(v string) (string, error) {
	switch strings.ToLower(v) {
	case "on", "off":
		return strings.ToLower(v), nil
	}
	return "", fmt.Errorf("want on or off, not %q", v)
}

func logLevel(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return "", fmt.Errorf("want debug, info, warn or error, not %q", v)
	}
	return strings.ToLower(l.String()), nil
}

// CheckParam validates name=value and returns the value in canonical form.
func CheckParam(name, value string) (string, error) {
	d, ok := ParamDefOf(name)
	if !ok {
		return "", fmt.Errorf("meta: no parameter %q (weft param list)", name)
	}
	v, err := d.check(value)
	if err != nil {
		return "", fmt.Errorf("meta: parameter %s: %w", name, err)
	}
	return v, nil
}

// ParamValue is a parameter's effective value and where it comes from.
type ParamValue struct {
	ParamDef
	Value  string
	Source string // "default", "persisted" (kept in the store), "set" (until the server restarts)
}

// ListParams returns every parameter's effective value: one set since the
// server started wins over one persisted, which wins over the default.
// Anyone may read them (they hold no secret).
func (s *Server) ListParams(ctx context.Context) ([]ParamValue, error) {
	if _, err := s.caller(ctx); err != nil {
		return nil, err
	}
	return s.paramValues()
}

func (s *Server) paramValues() ([]ParamValue, error) {
	out := make([]ParamValue, 0, len(Params))
	s.paramMu.Lock()
	defer s.paramMu.Unlock()
	for _, d := range Params {
		pv := ParamValue{ParamDef: d, Value: d.Default, Source: "default"}
		b, err := s.st.Get(store.ParamKey(d.Name))
		switch {
		case err == nil:
			pv.Value, pv.Source = string(b), "persisted"
		case !errors.Is(err, store.ErrNotFound):
			return nil, errnof(syscall.EIO, "params: %v", err)
		}
		if v, ok := s.paramSet[d.Name]; ok {
			pv.Value, pv.Source = v, "set"
		}
		out = append(out, pv)
	}
	return out, nil
}

// SetParam sets name to value on this server until it restarts or, with
// persist, in the store (replicated with the metadata, kept across
// restarts). Only root and servers may set (EPERM); an unknown name or a
// bad value is EINVAL and changes nothing.
func (s *Server) SetParam(ctx context.Context, name, value string, persist bool) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if !cl.isRoot() {
		return errnof(syscall.EPERM, "params: only root may set parameters")
	}
	v, err := CheckParam(name, value)
	if err != nil {
		return errnof(syscall.EINVAL, "%v", err)
	}
	if persist {
		if _, err := s.propose(ctx, &Command{Op: OpSetParam, Now: s.now(), Name: name, Text: v}); err != nil {
			return err
		}
	}
	s.paramMu.Lock()
	if persist {
		delete(s.paramSet, name) // the persisted value is now the effective one
	} else {
		s.paramSet[name] = v
	}
	s.paramMu.Unlock()
	s.applyParams(name)
	s.log.Info("meta: parameter set", "name", name, "value", v, "persist", persist)
	return nil
}

// applyParams applies the parameters the metadata server itself reads:
// its log level, and the rebuild's pace once rebuild.rate was set (until
// then --rebuild-rate, or `weft target rebuild-rate`, rules). only, if
// not "", limits it to that parameter (a set of another parameter must
// not undo a later `weft target rebuild-rate`).
func (s *Server) applyParams(only string) {
	ps, err := s.paramValues()
	if err != nil {
		s.log.Warn("meta: reading parameters", "err", err)
		return
	}
	for _, p := range ps {
		if only != "" && p.Name != only {
			continue
		}
		switch p.Name {
		case "log.level.meta":
			if s.opts.LogLevel == nil {
				continue
			}
			level := s.opts.DefaultLogLevel
			if p.Value != "" {
				_ = level.UnmarshalText([]byte(p.Value)) // checked when set
			}
			s.opts.LogLevel.Set(level)
		case "meta.file_copies":
			s.noCopies.Store(p.Value == "off")
		case "rebuild.rate":
			if p.Source == "default" || s.rb == nil {
				continue
			}
			if n, err := units.ParseSize(p.Value); err == nil { // checked when set
				s.SetRebuildRate(n)
			}
		}
	}
}

// setParam applies OpSetParam: the value is checked again (a command from
// an older or hostile log must not store what Set would refuse).
func (t *txn) setParam(c *Command) error {
	v, err := CheckParam(c.Name, c.Text)
	if err != nil {
		return errnof(syscall.EINVAL, "%v", err)
	}
	t.b.Set(store.ParamKey(c.Name), []byte(v))
	return nil
}

// Params implements metarpc.ParamService (ListParams in its wire form).
func (s *Server) Params(ctx context.Context) ([]metarpc.Param, error) {
	ps, err := s.ListParams(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]metarpc.Param, len(ps))
	for i, p := range ps {
		out[i] = metarpc.Param{Name: p.Name, Scope: p.Scope, Default: p.Default, Doc: p.Doc, Value: p.Value, Source: p.Source}
	}
	return out, nil
}

var _ metarpc.ParamService = (*Server)(nil)
