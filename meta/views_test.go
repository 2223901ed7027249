package meta

import (
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// TestReadsSeeOneState: while b is created and renamed over c again and
// again (each rename deletes the inode c named), lookups of c always find
// it and every listing of the directory holds c: a read takes the entry
// and its inode from one state (store.View), never the entry of one and
// the missing inode of the next. (With the entry and the inode read
// separately, lookups failed with ENOENT and listings left c out, on the
// in-memory and the pebble store.)
func TestReadsSeeOneState(t *testing.T) {
	for _, name := range []string{"mem", "pebble"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, func(o *Options) {
				if name == "pebble" {
					p, err := store.OpenPebble(t.TempDir(), store.PebbleOptions{})
					if err != nil {
						t.Fatal(err)
					}
					o.Store = p
				}
			})
			d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0)
			e.must(err)
			fifo := func(name string) {
				_, err := e.srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: name, Mode: syscall.S_IFIFO | 0644})
				e.must(err)
			}
			fifo("c")
			var (
				stop       atomic.Bool
				wg         sync.WaitGroup
				mu         sync.Mutex
				failures   []string
				reads      atomic.Int64
				renamedAll = make(chan struct{})
			)
			fail := func(s string) {
				mu.Lock()
				failures = append(failures, s)
				mu.Unlock()
			}
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						if _, err := e.srv.Lookup(ctx, d.Ino, "c"); err != nil {
							fail("lookup c: " + err.Error())
						}
						ents, err := e.srv.ReadDir(ctx, d.Ino, "", 100)
						if err != nil {
							fail("readdir: " + err.Error())
						}
						if !slices.ContainsFunc(ents, func(de proto.DirEntry) bool { return de.Name == "c" }) {
							fail("readdir without c")
						}
						reads.Add(1)
					}
				}()
			}
			go func() {
				defer close(renamedAll)
				for range 1500 {
					fifo("b")
					e.must(e.srv.Rename(ctx, d.Ino, "b", d.Ino, "c", 0))
				}
			}()
			<-renamedAll
			stop.Store(true)
			wg.Wait()
			if len(failures) > 0 {
				t.Fatalf("%d of %d reads saw no c, c existing throughout; first: %s", len(failures), reads.Load(), failures[0])
			}
		})
	}
}
