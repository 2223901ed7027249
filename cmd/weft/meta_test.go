package main

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/jobstats"
)

func TestMetaFlags(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "file", "x")
	for _, tc := range []struct {
		name string
		args []string
		err  []string
	}{
		{"missing data", nil, []string{"--data is required"}},
		{"data does not exist", []string{"--data", dir + "/nope"}, []string{"does not exist", "mkdir -p " + dir + "/nope"}},
		{"data is a file", []string{"--data", file}, []string{"not a directory"}},
		{"listen without port", []string{"--data", dir, "--listen", "127.0.0.1"}, []string{"--listen", "missing port"}},
		{"listen bad port", []string{"--data", dir, "--listen", "127.0.0.1:99999"}, []string{"bad port"}},
		{"bad log level", []string{"--data", dir, "--log-level", "loud"}, []string{"--log-level", "debug, info, warn or error"}},
		{"bad log format", []string{"--data", dir, "--log-format", "xml"}, []string{"--log-format"}},
		{"bad heartbeat timeout", []string{"--data", dir, "--heartbeat-timeout", "soon"}, []string{"cannot parse duration"}},
		{"zero heartbeat timeout", []string{"--data", dir, "--heartbeat-timeout", "0"}, []string{"must be positive"}},
		{"zero session lease", []string{"--data", dir, "--session-lease", "0"}, []string{"--session-lease must be positive"}},
		{"bad session lease", []string{"--data", dir, "--session-lease", "a while"}, []string{"cannot parse duration"}},
		{"zero orphan grace", []string{"--data", dir, "--orphan-grace", "0s"}, []string{"--orphan-grace must be positive"}},
		{"positional argument", []string{"--data", dir, "extra"}, []string{"unknown command"}},
		{"bad client network", []string{"--data", dir, "--client-networks", "10.0.0.0/33"}, []string{"--client-networks", "10.0.0.0/33"}},
		{"bad squash exempt", []string{"--data", dir, "--root-squash-exempt", "nowhere"}, []string{"--root-squash-exempt"}},
		{"squash to root", []string{"--data", dir, "--squash-uid", "0"}, []string{"must not be 0"}},
		{"peers without id", []string{"--data", dir, "--peers", "1=a:1,2=b:1,3=c:1"}, []string{"--id and --peers go together"}},
		{"id without peers", []string{"--data", dir, "--id", "1"}, []string{"--id and --peers go together"}},
		{"duplicate member id", []string{"--data", dir, "--id", "1", "--peers", "1=a:1,2=b:1,1=c:1"}, []string{"--peers", "member id 1 appears twice"}},
		{"duplicate member address", []string{"--data", dir, "--id", "1", "--peers", "1=a:1,2=a:1"}, []string{"--peers", "same address a:1"}},
		{"id not a member", []string{"--data", dir, "--id", "4", "--peers", "1=a:1,2=b:1,3=c:1"}, []string{"--id 4 is not one of the members"}},
		{"peer without port", []string{"--data", dir, "--id", "1", "--peers", "1=a:1,2=b"}, []string{"member 2", "missing port"}},
		{"peer id zero", []string{"--data", dir, "--id", "1", "--peers", "0=a:1,1=b:1"}, []string{"1 to 65535"}},
		{"listen is not own peer address", []string{"--data", dir, "--id", "1", "--peers", "1=a:1,2=b:1", "--listen", "c:1"}, []string{"--listen c:1", "a:1"}},
		{"store cache too small", []string{"--data", dir, "--store-cache", "1MiB"}, []string{"--store-cache 1MiB", "at least 8MiB"}},
		{"bad store cache", []string{"--data", dir, "--store-cache", "lots"}, []string{"--store-cache"}},
		{"election not above heartbeat", []string{"--data", dir, "--id", "1", "--peers", "1=a:1,2=b:1,3=c:1", "--election-ticks", "2", "--heartbeat-ticks", "2"}, []string{"--election-ticks more than it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			err := execute(metaCommand(func(context.Context, *metaOptions) error { ran = true; return nil }), tc.args...)
			wantErr(t, err, tc.err...)
			if ran {
				t.Fatal("server started despite invalid flags")
			}
		})
	}
}

func TestMetaConfigFile(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "meta.toml", `
listen = "10.1.2.3:7400"
data = "`+dir+`"
heartbeat_timeout = "45s"
session_lease = "2s"
orphan_grace = "1m"
rebuild_after = "30m"
rebuild_rate = "1GiB"
store_cache = "256MiB"
root_squash = true
squash_uid = 99
root_squash_exempt = ["10.0.0.0/8"]
log_level = "info"
log_format = "json"
gomaxprocs = 1
`)
	var got metaOptions
	run := func(_ context.Context, o *metaOptions) error { got = *o; return nil }
	if err := execute(metaCommand(run), "--config", cfg, "--listen", "127.0.0.1:9000"); err != nil {
		t.Fatal(err)
	}
	want := metaOptions{Listen: "127.0.0.1:9000", Data: dir, HeartbeatTimeout: units.Duration(45 * time.Second),
		SessionLease: units.Duration(2 * time.Second), LeaseTerm: units.Duration(2 * time.Second), OrphanGrace: units.Duration(time.Minute),
		RebuildAfter: units.Duration(30 * time.Minute), RebuildRate: units.Size(1 << 30),
		MovedGrace: units.Duration(time.Minute), StoreCache: units.Size(256 << 20),
		RaftTick: units.Duration(100 * time.Millisecond), ElectionTicks: 10, HeartbeatTicks: 1, LeaseReads: true,
		accessOptions:   accessOptions{RootSquash: true, SquashUid: 99, SquashGid: 65534, RootSquashExempt: []string{"10.0.0.0/8"}},
		jobstatsOptions: jobstatsOptions{JobstatsCleanup: units.Duration(jobstats.DefaultIdle), JobstatsMax: jobstats.DefaultMax},
		daemonOptions:   daemonOptions{Keys: defaultKeys, GoMaxProcs: 1, logOptions: logOptions{LogLevel: "info", LogFormat: "json"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("resolved %+v, want %+v", got, want)
	}

	bad := writeFile(t, dir, "bad.toml", "data = \"/x\"\nlisten_addr = \"1.2.3.4:1\"\n")
	wantErr(t, execute(metaCommand(run), "--config", bad), `unknown key "listen_addr"`, bad)
	wantErr(t, execute(metaCommand(run), "--config", dir+"/missing.toml", "--data", dir), "missing.toml")
}

func TestMetaDefaults(t *testing.T) {
	dir := t.TempDir()
	var got metaOptions
	if err := execute(metaCommand(func(_ context.Context, o *metaOptions) error { got = *o; return nil }), "--data", dir); err != nil {
		t.Fatal(err)
	}
	if got.Listen != "127.0.0.1:7400" || got.LogLevel != "warn" || got.HeartbeatTimeout != units.Duration(10*time.Second) ||
		got.SessionLease != units.Duration(30*time.Second) || got.OrphanGrace != units.Duration(30*time.Second) ||
		got.StoreCache != units.Size(64<<20) {
		t.Fatalf("defaults: %+v", got)
	}
}

// --accept-rollback is off unless given, and a flag only (not a config key:
// serving an older store is a decision for one start).
func TestMetaAcceptRollback(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--data", dir}, false},
		{[]string{"--data", dir, "--accept-rollback"}, true},
	} {
		var got metaOptions
		if err := execute(metaCommand(func(_ context.Context, o *metaOptions) error { got = *o; return nil }), tc.args...); err != nil {
			t.Fatal(err)
		}
		if got.AcceptRollback != tc.want {
			t.Fatalf("%v: AcceptRollback %v", tc.args, got.AcceptRollback)
		}
	}
	cfg := writeFile(t, dir, "meta.toml", "data = \""+dir+"\"\naccept_rollback = true\n")
	if err := execute(metaCommand(func(context.Context, *metaOptions) error { return nil }), "--config", cfg); err == nil {
		t.Fatal("accept_rollback accepted as a config key")
	}
}

// TestMetaConfigReplicated: the replicated group's keys in the config
// file; the member listens on its own address from peers.
func TestMetaConfigReplicated(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "meta.toml", `
data = "`+dir+`"
id = 2
peers = "1=10.0.0.1:7400,2=10.0.0.2:7400,3=10.0.0.3:7400"
raft_tick = "50ms"
election_ticks = 20
heartbeat_ticks = 2
follower_gomaxprocs = 1
`)
	var got metaOptions
	run := func(_ context.Context, o *metaOptions) error { got = *o; return nil }
	if err := execute(metaCommand(run), "--config", cfg); err != nil {
		t.Fatal(err)
	}
	if got.Listen != "10.0.0.2:7400" || got.ID != 2 || len(got.peers) != 3 || got.peers[3] != "10.0.0.3:7400" ||
		got.RaftTick != units.Duration(50*time.Millisecond) || got.ElectionTicks != 20 || got.HeartbeatTicks != 2 ||
		got.FollowerGoMaxProcs != 1 {
		t.Fatalf("resolved %+v", got)
	}
	wantErr(t, execute(metaCommand(run), "--data", dir, "--follower-gomaxprocs", "1"), "--follower-gomaxprocs is for a member")
	wantErr(t, execute(metaCommand(run), "--config", cfg, "--follower-gomaxprocs", "-1"), "--follower-gomaxprocs -1")
}
