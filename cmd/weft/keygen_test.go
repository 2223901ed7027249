package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/transport"
)

func TestKeygen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	if err := execute(newKeygenCmd(), "--out", dir); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"meta", "storage", "client"} {
		k, err := auth.Load(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		if string(k.Role()) != r {
			t.Errorf("bundle %s has role %s", r, k.Role())
		}
	}
	wantErr(t, execute(newKeygenCmd(), "--out", dir), "refusing to overwrite")
	one := filepath.Join(t.TempDir(), "node17")
	if err := execute(newKeygenCmd(), "--ca", filepath.Join(dir, "ca"), "--role", "client", "--name", "node17", "--out", one); err != nil {
		t.Fatal(err)
	}
	if k, err := auth.Load(one); err != nil || k.Name() != "node17" || k.Role() != transport.RoleClient {
		t.Fatalf("issued bundle: %v %+v", err, k)
	}
	wantErr(t, execute(newKeygenCmd(), "--ca", filepath.Join(dir, "ca"), "--role", "admin", "--name", "x", "--out", t.TempDir()), "role must be client, storage or meta")
	wantErr(t, execute(newKeygenCmd(), "--ca", filepath.Join(dir, "ca"), "--role", "client", "--out", t.TempDir()), "--name is required")
	wantErr(t, execute(newKeygenCmd()), "--out DIR is required")
}

// A daemon refuses to start with a bundle of the wrong role, or a loose
// private key, saying what to fix.
func TestDaemonKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	if err := auth.GenerateCluster(dir); err != nil {
		t.Fatal(err)
	}
	o := daemonOptions{Keys: filepath.Join(dir, "client"), logOptions: logOptions{LogLevel: "error", LogFormat: "text"}}
	_, err := o.start("weft storage", transport.RoleStorage)
	if err == nil || !strings.Contains(err.Error(), "keys in "+o.Keys+" are for role client; weft storage (a storage server) needs a storage bundle") {
		t.Fatalf("storage with a client bundle: %v", err)
	}
	o.Keys = filepath.Join(dir, "storage")
	if err := os.Chmod(filepath.Join(o.Keys, "node.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = o.start("weft storage", transport.RoleStorage)
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+filepath.Join(o.Keys, "node.key")) {
		t.Fatalf("storage with a loose node.key: %v", err)
	}
	o.Keys = filepath.Join(t.TempDir(), "none")
	_, err = o.start("weft meta", transport.RoleMeta)
	if err == nil || !strings.Contains(err.Error(), "weft keygen") {
		t.Fatalf("meta without keys: %v", err)
	}
	o.Keys = filepath.Join(dir, "meta")
	d, err := o.start("weft meta", transport.RoleMeta)
	if err != nil {
		t.Fatal(err)
	}
	d.stop()
}
