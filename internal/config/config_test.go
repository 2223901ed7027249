package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/internal/units"
)

type logging struct {
	LogLevel string `toml:"log_level"`
}

type opts struct {
	Listen   string         `toml:"listen"`
	Targets  []string       `toml:"targets" flag:"target"`
	Capacity units.Size     `toml:"capacity"`
	Timeout  units.Duration `toml:"timeout"`
	Debug    bool           `toml:"debug"`
	logging
	Internal string `toml:"-"`
	Untagged string
}

func flags(o *opts) *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:7410", "")
	fs.StringArrayVar(&o.Targets, "target", nil, "")
	o.Capacity = 0
	fs.Var(&o.Capacity, "capacity", "")
	o.Timeout = units.Duration(30 * time.Second)
	fs.Var(&o.Timeout, "timeout", "")
	fs.BoolVar(&o.Debug, "debug", false, "")
	fs.StringVar(&o.LogLevel, "log-level", "warn", "")
	return fs
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		file string
		want opts
		err  string
	}{
		{
			name: "no file keys keeps defaults",
			want: opts{Listen: "127.0.0.1:7410", Timeout: units.Duration(30 * time.Second), logging: logging{LogLevel: "warn"}},
		},
		{
			name: "file sets everything",
			file: `listen = "10.0.0.1:7410"
targets = ["/a", "/b"]
capacity = "10GiB"
timeout = "1m"
debug = true
log_level = "debug"`,
			want: opts{Listen: "10.0.0.1:7410", Targets: []string{"/a", "/b"}, Capacity: 10 << 30,
				Timeout: units.Duration(time.Minute), Debug: true, logging: logging{LogLevel: "debug"}},
		},
		{
			name: "flags override file",
			args: []string{"--listen", "10.0.0.2:1", "--target", "/c", "--capacity", "1M", "--log-level", "error"},
			file: `listen = "10.0.0.1:7410"
targets = ["/a", "/b"]
capacity = "10GiB"
timeout = "5s"
log_level = "debug"`,
			want: opts{Listen: "10.0.0.2:1", Targets: []string{"/c"}, Capacity: 1 << 20,
				Timeout: units.Duration(5 * time.Second), logging: logging{LogLevel: "error"}},
		},
		{
			name: "explicit false flag beats true in file",
			args: []string{"--debug=false"},
			file: `debug = true`,
			want: opts{Listen: "127.0.0.1:7410", Timeout: units.Duration(30 * time.Second), logging: logging{LogLevel: "warn"}},
		},
		{name: "unknown key", file: "listen = \"x:1\"\ncapcity = \"1G\"", err: `unknown key "capcity" in test.toml (known keys: capacity, debug, listen, log_level, targets, timeout)`},
		{name: "unknown table key", file: "[server]\nport = 1", err: `unknown key "server"`},
		{name: "untagged field is not a key", file: `untagged = "x"`, err: `unknown key "untagged"`},
		{name: "ignored field is not a key", file: `Internal = "x"`, err: `unknown key "Internal"`},
		{name: "bad size", file: `capacity = "ten gigs"`, err: `cannot parse size "ten gigs"`},
		{name: "bad duration", file: `timeout = "soon"`, err: `cannot parse duration "soon"`},
		{name: "wrong type", file: `debug = "yes"`, err: "test.toml"},
		{name: "syntax error", file: `listen = `, err: "config test.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o opts
			fs := flags(&o)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := Decode("test.toml", tc.file, fs, &o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Decode error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.Listen != tc.want.Listen || strings.Join(o.Targets, ",") != strings.Join(tc.want.Targets, ",") ||
				o.Capacity != tc.want.Capacity || o.Timeout != tc.want.Timeout || o.Debug != tc.want.Debug || o.LogLevel != tc.want.LogLevel {
				t.Fatalf("got %+v, want %+v", o, tc.want)
			}
		})
	}
}

func TestUnknownKeyIsSentinel(t *testing.T) {
	var o opts
	if err := Decode("f", "nope = 1", nil, &o); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("err = %v, want ErrUnknownKey", err)
	}
}

func TestLoad(t *testing.T) {
	var o opts
	if err := Load("", nil, &o); err != nil {
		t.Fatalf("empty path: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "weft.toml")
	if err := os.WriteFile(p, []byte(`listen = "h:1"`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Load(p, nil, &o); err != nil || o.Listen != "h:1" {
		t.Fatalf("Load = %v, listen %q", err, o.Listen)
	}
	err := Load(filepath.Join(dir, "missing.toml"), nil, &o)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.toml") {
		t.Fatalf("missing file: %v", err)
	}
	if err := Decode("f", "", nil, o); err == nil {
		t.Fatal("non-pointer dst accepted")
	}
}

func TestKeys(t *testing.T) {
	got := strings.Join(Keys(&opts{}), ",")
	if want := "capacity,debug,listen,log_level,targets,timeout"; got != want {
		t.Fatalf("Keys = %s, want %s", got, want)
	}
}
