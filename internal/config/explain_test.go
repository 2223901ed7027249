package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/spf13/pflag"
)

func TestExplain(t *testing.T) {
	type opts struct {
		Timeout string `toml:"timeout"`
		Listen  string `toml:"listen"`
		ReadBuf string `toml:"read_buffer"`
	}
	path := filepath.Join(t.TempDir(), "x.toml")
	if err := os.WriteFile(path, []byte("timeout = \"0s\"\nread_buffer = \"1\"\nlisten = \"a\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	var o opts
	fs.StringVar(&o.Timeout, "timeout", "", "")
	fs.StringVar(&o.Listen, "listen", "", "")
	fs.StringVar(&o.ReadBuf, "read-buffer", "", "")
	if err := fs.Parse([]string{"--listen", "b"}); err != nil {
		t.Fatal(err)
	}
	set := FromFile(path, fs, &o)
	if len(set) != 2 {
		t.Fatalf("FromFile = %v, want timeout and read_buffer (listen was given as a flag)", set)
	}
	base := errors.New("x")
	err := Explain(syscall.EINVAL, path, set)
	if err != syscall.EINVAL {
		t.Fatalf("an error that names no flag changed: %v", err)
	}
	err = Explain(fmt.Errorf("--timeout must be positive; --read-buffer 1 below --read-buffer-total; --listen bad: %w", base), path, set)
	want := "timeout (in " + path + ") must be positive; read_buffer (in " + path + ") 1 below --read-buffer-total; --listen bad: x"
	if err.Error() != want || !errors.Is(err, base) {
		t.Fatalf("Explain = %q, want %q", err, want)
	}
}
