package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestSmallFileCopies: a small file written and closed on one mount is
// read on another from the metadata group's copy of its bytes, with every
// storage server down, also after the metadata leader was killed (the
// copy is replicated state); once the file is rewritten, readers get the
// new bytes (from the storage servers, which must be up again).
func TestSmallFileCopies(t *testing.T) {
	t.Parallel() // waits on an election, on a cluster of its own
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 2, Mounts: 2, MetaReplicas: 3, Timeout: "30s"})
	w, r := c.Mount(0), c.Mount(1)
	small := pattern(3, 0, 3901)
	if err := os.WriteFile(filepath.Join(w, "small"), small, 0o644); err != nil {
		t.Fatal(err)
	}
	big := pattern(4, 0, 64<<10)
	if err := os.WriteFile(filepath.Join(w, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(step, name string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(r, name))
		if err != nil {
			t.Fatalf("%s: read %s: %v", step, name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %s: %s", step, name, firstDiff(got, want))
		}
	}

	c.StopStorage(0)
	c.StopStorage(1)
	check("storage servers down", "small", small)

	old := c.WaitMetaLeader()
	c.StopMetaMember(old)
	if leader := c.WaitMetaLeader(); leader == old {
		t.Fatalf("meta-%d was killed but is reported leader", old+1)
	}
	check("storage down, after a failover", "small", small)
	c.StartMetaMember(old)

	c.StartStorage(0)
	c.StartStorage(1)
	c.WaitTargetsUp(2)
	check("storage back", "big", big)
	f, err := os.OpenFile(filepath.Join(w, "small"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("rewritten"), 100); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(small[100:], "rewritten")
	check("after a rewrite", "small", small)
}
