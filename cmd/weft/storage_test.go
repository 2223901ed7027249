package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/units"
)

func TestStorageFlags(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "file", "x")
	base := []string{"--meta", "127.0.0.1:7400", "--target", dir}
	for _, tc := range []struct {
		name string
		args []string
		err  []string
	}{
		{"missing meta", []string{"--target", dir}, []string{"--meta is required"}},
		{"meta without host", []string{"--meta", ":7400", "--target", dir}, []string{"--meta", "missing host"}},
		{"meta garbage", []string{"--meta", "meta-host", "--target", dir}, []string{"--meta", "missing port"}},
		{"missing target", []string{"--meta", "127.0.0.1:7400"}, []string{"--target is required"}},
		{"target does not exist", []string{"--meta", "127.0.0.1:7400", "--target", dir + "/t9"}, []string{"does not exist", "mkdir -p"}},
		{"target is a file", []string{"--meta", "127.0.0.1:7400", "--target", file}, []string{"not a directory"}},
		{"target twice", append(slices.Clone(base), "--target", dir+"/."), []string{"given twice"}},
		{"wildcard listen without advertise", append(slices.Clone(base), "--listen", "0.0.0.0:7410"), []string{"--advertise"}},
		{"empty-host listen without advertise", append(slices.Clone(base), "--listen", ":7410"), []string{"--advertise"}},
		{"wildcard advertise", append(slices.Clone(base), "--listen", ":7410", "--advertise", "0.0.0.0:7410"), []string{"not a wildcard"}},
		{"bad advertise", append(slices.Clone(base), "--advertise", "host"), []string{"--advertise", "missing port"}},
		{"bad capacity", append(slices.Clone(base), "--capacity", "lots"), []string{"cannot parse size"}},
		{"bad heartbeat", append(slices.Clone(base), "--heartbeat-interval", "0s"), []string{"must be positive"}},
		{"bad log level", append(slices.Clone(base), "--log-level", "trace"), []string{"--log-level"}},
		{"read buffer below one read", append(slices.Clone(base), "--read-buffer-per-conn", "1MiB"), []string{"--read-buffer-per-conn", "at least 16MiB"}},
		{"local socket path too long", append(slices.Clone(base), "--local-socket", "/"+strings.Repeat("s", 120)), []string{"--local-socket", "at most 107"}},
		{"read buffer total below per conn", append(slices.Clone(base), "--read-buffer-total", "32MiB"), []string{"--read-buffer-total", "below"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			err := execute(storageCommand(func(context.Context, *storageOptions) error { ran = true; return nil }), tc.args...)
			wantErr(t, err, tc.err...)
			if ran {
				t.Fatal("server started despite invalid flags")
			}
		})
	}
}

func TestStorageConfigFile(t *testing.T) {
	dir := t.TempDir()
	t0, t1, t2 := dir+"/t0", dir+"/t1", dir+"/t2"
	for _, d := range []string{t0, t1, t2} {
		if err := mkdir(d); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeFile(t, dir, "storage.toml", `
listen = "0.0.0.0:7410"
advertise = "10.0.0.5:7410"
meta = "10.0.0.1:7400"
targets = ["`+t0+`", "`+t1+`"]
capacity = "10GiB"
heartbeat_interval = "5s"
read_buffer_per_conn = "32MiB"
log_level = "debug"
log_format = "text"
`)
	var got storageOptions
	run := func(_ context.Context, o *storageOptions) error { got = *o; return nil }
	if err := execute(storageCommand(run), "--config", cfg); err != nil {
		t.Fatal(err)
	}
	if got.Listen != "0.0.0.0:7410" || got.Advertise != "10.0.0.5:7410" || got.Meta != "10.0.0.1:7400" ||
		!slices.Equal(got.Targets, []string{t0, t1}) || got.Capacity != 10<<30 ||
		got.HeartbeatInterval != units.Duration(5*time.Second) || got.LogLevel != "debug" ||
		got.ReadBufferPerConn != 32<<20 || got.ReadBufferTotal != 512<<20 {
		t.Fatalf("from file: %+v", got)
	}

	// Flags replace the file's values, the target list as a whole.
	if err := execute(storageCommand(run), "--config", cfg, "--target", t2, "--capacity", "1MiB", "--meta", "10.0.0.2:7400"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Targets, []string{t2}) || got.Capacity != 1<<20 || got.Meta != "10.0.0.2:7400" || got.Advertise != "10.0.0.5:7410" {
		t.Fatalf("flags over file: %+v", got)
	}

	// --targets, the config key's name, is the same flag as --target.
	if err := execute(storageCommand(run), "--config", cfg, "--targets", t2, "--target", t0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Targets, []string{t2, t0}) {
		t.Fatalf("--targets and --target: %v", got.Targets)
	}

	bad := writeFile(t, dir, "bad.toml", "target = [\"/x\"]\n")
	wantErr(t, execute(storageCommand(run), "--config", bad), `unknown key "target"`, bad, "targets")
	badSize := writeFile(t, dir, "badsize.toml", "capacity = \"10 gigs\"\n")
	wantErr(t, execute(storageCommand(run), "--config", badSize, "--meta", "h:1", "--target", t0), "capacity", badSize)
}
