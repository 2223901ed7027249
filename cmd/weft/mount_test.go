package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/units"
)

func TestMountFlags(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "file", "x")
	full := dir // holds file
	dir = filepath.Join(dir, "empty")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		err  []string
	}{
		{"missing meta", []string{dir}, []string{"--meta is required"}},
		{"bad meta", []string{"--meta", "127.0.0.1:", dir}, []string{"bad port"}},
		{"missing mountpoint", []string{"--meta", "127.0.0.1:7400"}, []string{"MOUNTPOINT is required"}},
		{"mountpoint does not exist", []string{"--meta", "127.0.0.1:7400", dir + "/mnt"}, []string{"does not exist", "mkdir -p " + dir + "/mnt"}},
		{"mountpoint is a file", []string{"--meta", "127.0.0.1:7400", file}, []string{"not a directory"}},
		{"two mountpoints", []string{"--meta", "127.0.0.1:7400", dir, dir}, []string{"accepts at most 1 arg"}},
		{"bad timeout", []string{"--meta", "127.0.0.1:7400", "--timeout", "forever", dir}, []string{"cannot parse duration"}},
		{"zero timeout", []string{"--meta", "127.0.0.1:7400", "--timeout", "0s", dir}, []string{"--timeout must be positive"}},
		{"bad cache limit", []string{"--meta", "127.0.0.1:7400", "--cache-limit", "1 gig", dir}, []string{"cannot parse size"}},
		{"mountpoint not empty", []string{"--meta", "127.0.0.1:7400", full}, []string{"is not empty", `"file"`, "--nonempty"}},
		{"tiny cache limit", []string{"--meta", "127.0.0.1:7400", "--cache-limit", "4k", dir}, []string{"too small"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			err := execute(mountCommand(func(context.Context, *mountOptions) error { ran = true; return nil }), tc.args...)
			wantErr(t, err, tc.err...)
			if ran {
				t.Fatal("mount started despite invalid flags")
			}
		})
	}
	ran := false
	if err := execute(mountCommand(func(context.Context, *mountOptions) error { ran = true; return nil }), "--meta", "127.0.0.1:7400", "--nonempty", full); err != nil || !ran {
		t.Fatalf("--nonempty over a non-empty directory: %v (ran %v)", err, ran)
	}
}

func TestMountDefaultsAndConfig(t *testing.T) {
	dir := t.TempDir()
	mnt := dir + "/mnt"
	if err := mkdir(mnt); err != nil {
		t.Fatal(err)
	}
	var got mountOptions
	run := func(_ context.Context, o *mountOptions) error { got = *o; return nil }
	if err := execute(mountCommand(run), "--meta", "10.0.0.1:7400", mnt); err != nil {
		t.Fatal(err)
	}
	want := mountOptions{Meta: "10.0.0.1:7400", Mountpoint: mnt, Timeout: units.Duration(30 * time.Second),
		CacheLimit: 1 << 30, AllowOther: true, UnmountTimeout: units.Duration(10 * time.Second), JobIDVar: "SLURM_JOB_ID", daemonOptions: daemonOptions{Keys: defaultKeys, logOptions: logOptions{LogLevel: "warn", LogFormat: "text"}}}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}

	cfg := writeFile(t, dir, "mount.toml", `
meta = "10.0.0.9:7400"
mountpoint = "`+mnt+`"
timeout = "2m"
cache_limit = "4GiB"
allow_other = false
debug = true
unmount_timeout = "3s"
jobid_var = "procname_uid"
log_level = "error"
log_format = "json"
`)
	if err := execute(mountCommand(run), "--config", cfg); err != nil {
		t.Fatal(err)
	}
	want = mountOptions{Meta: "10.0.0.9:7400", Mountpoint: mnt, Timeout: units.Duration(2 * time.Minute),
		CacheLimit: 4 << 30, AllowOther: false, Debug: true, UnmountTimeout: units.Duration(3 * time.Second), JobIDVar: "procname_uid", daemonOptions: daemonOptions{Keys: defaultKeys, logOptions: logOptions{LogLevel: "error", LogFormat: "json"}}}
	if got != want {
		t.Fatalf("from file %+v, want %+v", got, want)
	}

	// The argument beats the file's mountpoint; a flag beats the file's value.
	other := dir + "/other"
	if err := mkdir(other); err != nil {
		t.Fatal(err)
	}
	if err := execute(mountCommand(run), "--config", cfg, "--allow-other", "--timeout", "5s", other); err != nil {
		t.Fatal(err)
	}
	if got.Mountpoint != other || !got.AllowOther || got.Timeout != units.Duration(5*time.Second) || got.CacheLimit != 4<<30 {
		t.Fatalf("overrides: %+v", got)
	}
	if err := execute(mountCommand(run), "--meta", "10.0.0.1:7400", "--jobid-var", "none", mnt); err != nil || got.JobIDVar != "" {
		t.Fatalf("--jobid-var none: %q, %v", got.JobIDVar, err)
	}
	if err := execute(mountCommand(run), "--meta", "10.0.0.1:7400", "--jobid-var", "A=B", mnt); err == nil || !strings.Contains(err.Error(), "--jobid-var") {
		t.Fatalf("--jobid-var A=B: %v", err)
	}

	bad := writeFile(t, dir, "bad.toml", "meta = \"h:1\"\nallow_others = true\n")
	wantErr(t, execute(mountCommand(run), "--config", bad, mnt), `unknown key "allow_others"`, bad)
	// A bad value from the file is named as the file's key, not as a flag
	// that was never given; a bad flag is still named as the flag.
	zero := writeFile(t, dir, "zero.toml", "meta = \"h:1\"\ntimeout = \"0s\"\n")
	err := execute(mountCommand(run), "--config", zero, mnt)
	wantErr(t, err, "timeout (in "+zero+") must be positive")
	wantErr(t, execute(mountCommand(run), "--config", zero, "--timeout", "0s", mnt), "--timeout must be positive")
}
