package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseNamed(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []named
		err  bool
	}{
		{in: "", want: nil},
		{in: "meta=12", want: []named{{"meta", "12"}}},
		{in: "a=1,b=/x/y", want: []named{{"a", "1"}, {"b", "/x/y"}}},
		{in: "a", err: true},
		{in: "=1", err: true},
		{in: "a=", err: true},
	} {
		got, err := parseNamed(tc.in)
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseNamed(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		files, objects int
		want           []int
	}{
		{1000000, 0, []int{0, 250000, 500000, 750000, 1000000}},
		{1000000, 100000, []int{0, 100000, 250000, 500000, 750000, 1000000}},
		{1000000, 250000, []int{0, 250000, 500000, 750000, 1000000}},
		{1000000, 1000000, []int{0, 250000, 500000, 750000, 1000000}},
		{3, 0, []int{0, 1, 2, 3}},
		{0, 0, []int{0}},
	} {
		if got := checkpoints(tc.files, tc.objects); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("checkpoints(%d, %d) = %v, want %v", tc.files, tc.objects, got, tc.want)
		}
	}
}

func TestParseStatus(t *testing.T) {
	const status = "Name:\tweft\nVmPeak:\t 2000 kB\nVmHWM:\t    3000 kB\nVmRSS:\t    2048 kB\nThreads:\t9\n"
	rss, hwm, err := parseStatus(status)
	if err != nil || rss != 2048<<10 || hwm != 3000<<10 {
		t.Errorf("parseStatus = %d, %d, %v; want %d, %d", rss, hwm, err, 2048<<10, 3000<<10)
	}
	for _, bad := range []string{"Name:\tkthreadd\n", "VmRSS:\t12 kB\n", "VmRSS:\tx kB\nVmHWM:\t1 kB\n", "VmRSS:\t1 MB\nVmHWM:\t1 kB\n"} {
		if _, _, err := parseStatus(bad); err == nil {
			t.Errorf("parseStatus(%q) succeeded", bad)
		}
	}
}

// TestRun loads a real meta server and a real storage server (in this
// process, over TCP) and checks every file and object is there.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	metaDir, targetDir := t.TempDir(), t.TempDir()
	addrc := make(chan string, 1)
	metaDone := make(chan error, 1)
	go func() {
		metaDone <- meta.Run(ctx, meta.Config{DataDir: metaDir, ListenAddr: "127.0.0.1:0", AllowUnauthenticated: true, Ready: func(a string) { addrc <- a }})
	}()
	var metaAddr string
	select {
	case metaAddr = <-addrc:
	case err := <-metaDone:
		t.Fatalf("meta.Run: %v", err)
	}
	storageDone := make(chan error, 1)
	go func() {
		storageDone <- storage.Run(ctx, storage.Config{ListenAddr: "127.0.0.1:0", MetaAddr: metaAddr, Targets: []string{targetDir}, HeartbeatInterval: 50 * time.Millisecond, AllowUnauthenticated: true})
	}()
	t.Cleanup(func() {
		cancel()
		for _, c := range []chan error{metaDone, storageDone} {
			if err := <-c; err != nil {
				t.Errorf("server: %v", err)
			}
		}
	})

	const files, dirs, objects, size = 203, 7, 31, 5000
	var out bytes.Buffer
	c := config{
		Meta: metaAddr, Files: files, Dirs: dirs, Workers: 8, Objects: objects, ObjectSize: size,
		Targets: 1, Timeout: 10 * time.Second,
		Watch: []named{{"self", strconv.Itoa(os.Getpid())}},
		Du:    []named{{"meta", metaDir}},
	}
	if err := run(ctx, c, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}

	// The report: a header and one row per checkpoint, files in column 1.
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if want := "self.rss(MiB)"; !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "meta.du(MiB)") {
		t.Errorf("header %q lacks %s or meta.du(MiB)", lines[0], want)
	}
	var rows []int
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 6 {
			t.Fatalf("row %q: want 6 columns", l)
		}
		n, _ := strconv.Atoi(f[0])
		rows = append(rows, n)
		if rss, _ := strconv.ParseFloat(f[3], 64); rss <= 0 {
			t.Errorf("row %q: rss %s not positive", l, f[3])
		}
	}
	if want := checkpoints(files, objects); !reflect.DeepEqual(rows, want) {
		t.Errorf("rows at %v, want %v", rows, want)
	}

	// What the servers hold: every file in its directory, the first
	// `objects` with their size recorded and their object readable.
	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	mc := metarpc.NewClient(pool, metaAddr)
	top, err := mc.ReadDir(ctx, proto.RootIno, "", 10)
	if err != nil || len(top) != 1 || !strings.HasPrefix(top[0].Name, "mdload-") {
		t.Fatalf("root holds %v, %v; want one mdload-* directory", top, err)
	}
	ds, err := mc.ReadDir(ctx, top[0].Attr.Ino, "", 100)
	if err != nil || len(ds) != dirs {
		t.Fatalf("%d directories, %v; want %d", len(ds), err, dirs)
	}
	seen, withData := 0, 0
	for d, de := range ds {
		ents, err := mc.ReadDir(ctx, de.Attr.Ino, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			i, err := strconv.Atoi(strings.TrimPrefix(e.Name, "f"))
			if err != nil || i%dirs != d {
				t.Errorf("%s/%s: not a file of this directory", de.Name, e.Name)
			}
			want := uint64(0)
			if i < objects {
				want = size
				withData++
			}
			if e.Attr.Size != want || !e.Attr.IsRegular() {
				t.Errorf("%s/%s: size %d regular %v; want size %d", de.Name, e.Name, e.Attr.Size, e.Attr.IsRegular(), want)
			}
			seen++
		}
	}
	if seen != files || withData != objects {
		t.Errorf("%d files, %d with data; want %d, %d", seen, withData, files, objects)
	}
	if bad := readBack(ctx, t, mc, pool, ds, objects, dirs, size); bad != 0 {
		t.Errorf("%d objects did not read back", bad)
	}
}

// readBack reads the object of each of the first n files and counts those
// that are not size bytes of the pattern run writes.
func readBack(ctx context.Context, t *testing.T, mc *metarpc.Client, pool *transport.Pool, ds []proto.DirEntry, n, dirs, size int) int {
	t.Helper()
	ts, err := mc.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[proto.TargetID]string{}
	for _, ti := range ts {
		addrs[ti.ID] = ti.Addr
	}
	sc := storagerpc.NewClient(pool, func(_ context.Context, id proto.TargetID) (string, error) { return addrs[id], nil })
	bad := 0
	for i := range n {
		a, err := mc.Lookup(ctx, ds[i%dirs].Attr.Ino, fmt.Sprintf("f%07d", i))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, size+1)
		got, err := sc.Read(ctx, a.Layout.Targets[0], proto.ObjectID{Ino: a.Ino, Gen: a.Gen}, 0, buf)
		if err != nil || got != size {
			bad++
			continue
		}
		for j := range size {
			if buf[j] != byte(j) {
				bad++
				break
			}
		}
	}
	return bad
}
