package meta

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// req returns ctx for request seq of in-process session id.
func req(id byte, seq uint64) context.Context {
	return proto.WithSeq(proto.WithSession(ctx, proto.SessionID{id}), seq)
}

// replies counts the remembered replies of in-process session id.
func (e *env) replies(id byte) int {
	p := store.ReplyPrefix(proto.SessionID{id}, "")
	n := 0
	e.st.Scan(p, store.PrefixEnd(p), func(_, _ []byte) bool { n++; return true })
	return n
}

// TestDedupeCreate: the same (session, seq) create applied twice makes one
// inode and gives the same reply; so does a create through CreateOpen,
// which also counts one handle, not two.
func TestDedupeCreate(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	in := proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0644, Exclusive: true}
	a1, p1, _, err := e.srv.CreateOpen(req(1, 1), in, 0)
	e.must(err)
	files, _ := e.srv.StatFS(ctx)
	a2, p2, _, err := e.srv.CreateOpen(req(1, 1), in, 0)
	if err != nil {
		t.Fatalf("retried exclusive create: %v, want the first attempt's success", err)
	}
	if !reflect.DeepEqual(a1, a2) || !reflect.DeepEqual(p1, p2) {
		t.Fatalf("retried create answered\n %+v %+v\nwant\n %+v %+v", a2, p2, a1, p1)
	}
	if again, _ := e.srv.StatFS(ctx); again.Files != files.Files {
		t.Fatalf("the retry made an inode: %d files, want %d", again.Files, files.Files)
	}
	// The same name under a new sequence number is a new request.
	if _, err := e.srv.Create(req(1, 2), in); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("a new exclusive create of the name: %v", err)
	}
	// Another session with the same sequence number is another request.
	if _, err := e.srv.Create(req(2, 1), in); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("another session's create: %v", err)
	}

	g := proto.CreateIn{Parent: proto.RootIno, Name: "g", Mode: 0644, Exclusive: true}
	o1, _, _, err := e.srv.CreateOpen(req(1, 3), g, proto.AccessReadWrite)
	e.must(err)
	o2, _, _, err := e.srv.CreateOpen(req(1, 3), g, proto.AccessReadWrite)
	if err != nil || o2.Ino != o1.Ino {
		t.Fatalf("retried CreateOpen: %+v %v, want inode %d", o2, err, o1.Ino)
	}
	if n := e.srv.OpenCount(o1.Ino); n != 1 {
		t.Fatalf("a retried CreateOpen counted %d handles, want 1", n)
	}
}

// TestDedupeUnlinkAndFailures: a retried unlink answers success, not
// ENOENT; a failed request's errno is remembered too (its retry is not
// applied again, even when it would now succeed).
func TestDedupeUnlinkAndFailures(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	_, err := e.srv.Create(req(1, 1), proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0644})
	e.must(err)
	pa, err := e.srv.UnlinkAt(req(1, 2), proto.RootIno, "f")
	e.must(err)
	pb, err := e.srv.UnlinkAt(req(1, 2), proto.RootIno, "f")
	if err != nil || !reflect.DeepEqual(pa, pb) {
		t.Fatalf("retried unlink: %+v %v, want the first attempt's %+v", pb, err, pa)
	}
	if err := e.srv.Unlink(req(1, 3), proto.RootIno, "f"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("a new unlink of the name: %v", err)
	}
	// Request 4 fails; the name is then made by request 5; request 4's
	// retry still answers its ENOENT and changes nothing.
	if _, err := e.srv.RmdirAt(req(1, 4), proto.RootIno, "d"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("rmdir of nothing: %v", err)
	}
	_, err = e.srv.Mkdir(req(1, 5), proto.RootIno, "d", 0755, 0, 0)
	e.must(err)
	if _, err := e.srv.RmdirAt(req(1, 4), proto.RootIno, "d"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("retried failed rmdir: %v, want its ENOENT", err)
	}
	if _, err := e.srv.Lookup(ctx, proto.RootIno, "d"); err != nil {
		t.Fatalf("the retry of a failed rmdir removed the directory: %v", err)
	}
	// Requests without a sequence number are never deduplicated.
	_, err = e.srv.Mkdir(proto.WithSession(ctx, proto.SessionID{1}), proto.RootIno, "e", 0755, 0, 0)
	e.must(err)
	if _, err := e.srv.Mkdir(proto.WithSession(ctx, proto.SessionID{1}), proto.RootIno, "e", 0755, 0, 0); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("a repeated mkdir without sequence numbers: %v", err)
	}
}

// TestDedupeForgets: a session keeps the replies of its last
// MaxPendingRequests requests (older ones are overwritten, and their retry
// is applied as new), and loses them all when it ends.
func TestDedupeForgets(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.SessionLease = 50 * time.Millisecond })
	_, err := e.srv.Mkdir(req(1, 1), proto.RootIno, "first", 0755, 0, 0)
	e.must(err)
	for seq := uint64(2); seq <= proto.MaxPendingRequests+1; seq++ {
		_, err := e.srv.Mkdir(req(1, seq), proto.RootIno, fmt.Sprint("d", seq), 0755, 0, 0)
		e.must(err)
	}
	if n := e.replies(1); n != proto.MaxPendingRequests {
		t.Fatalf("%d replies kept, want %d", n, proto.MaxPendingRequests)
	}
	if _, err := e.srv.Mkdir(req(1, 2), proto.RootIno, "d2", 0755, 0, 0); err != nil {
		t.Fatalf("retry of a request still remembered: %v", err)
	}
	if _, err := e.srv.Mkdir(req(1, 1), proto.RootIno, "first", 0755, 0, 0); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("retry of a request no longer remembered: %v, want it applied again (EEXIST)", err)
	}
	// A session that is opened and then expires loses its replies.
	_, err = e.srv.OpenSession(req(1, 0), nil)
	e.must(err)
	waitFor(t, "the session to expire and its replies to go", func() bool { return e.replies(1) == 0 })
}

// FuzzDecodeReply: the stored-reply decoder never panics, and what decodes
// re-encodes to the same bytes.
func FuzzDecodeReply(f *testing.F) {
	f.Add(encodeReply(7, syscall.EEXIST, &applyResult{attr: proto.Attr{Ino: 5, Mode: 0100644}, parent: proto.Attr{Ino: 1}}))
	f.Add(encodeReply(1, 0, &applyResult{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, errno, res, err := decodeReply(b)
		if err != nil {
			return
		}
		seq2, errno2, res2, err := decodeReply(encodeReply(seq, errno, &res))
		if err != nil || seq2 != seq || errno2 != errno || !reflect.DeepEqual(res2, res) {
			t.Fatalf("stored reply does not round-trip: %v", err)
		}
	})
}
