package localread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/internal/bufpool"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/storagerpc"
)

// Options configure a Reader.
type Options struct {
	Logger *slog.Logger
	// MaxOpen bounds the objects whose descriptors are kept open (two
	// each); 0 = DefaultMaxOpen.
	MaxOpen int
	// Now is the clock capabilities' expiry is checked against; default
	// time.Now. (The socket's server is on this host, so this clock is
	// the one that checked the capability.)
	Now func() time.Time
	// DirectMin: a read of at least this many bytes whose offset, length
	// and buffer are aligned to DirectAlign bypasses the page cache of
	// this host (O_DIRECT, on a second descriptor of the object's data
	// file, opened on first use): a cold sequential read then moves at
	// the disk's speed, with one copy less and no page cache to fill and
	// evict. 0: DefaultDirectMin; negative: never (every read through
	// the page cache, where re-reads of what fits in memory are served
	// from it). A read whose context is marked proto.WithUncached (its
	// application opened the file O_DIRECT) bypasses the page cache at
	// any size, if aligned, unless DirectMin is negative.
	DirectMin int
}

// DefaultDirectMin is Options.DirectMin's default: large reads, which
// stream, bypass the page cache; small ones (4 KiB random reads, small
// files) keep it.
const DefaultDirectMin = 128 << 10

// DirectAlign is the alignment O_DIRECT reads are made with (the
// logical block size of every disk in use is 512 or 4,096 bytes).
const DirectAlign = 4096

// Reader is a storagerpc.Client whose Read reads objects of storage
// servers on this host straight from their files (see the package
// documentation); every other call, and every read it cannot serve, goes
// to the Client. It is safe for concurrent use.
type Reader struct {
	*storagerpc.Client
	log   *slog.Logger
	now   func() time.Time
	cache *fdCache
	bufs  *bufpool.Pool
	uid   int
	// directMin is Options.DirectMin resolved (0: never).
	directMin int

	base   context.Context // of background probes; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	targets map[proto.TargetID]*targetState
	servers map[storagerpc.LocalInfo]*server

	local, fallback, opens atomic.Uint64
	direct                 atomic.Uint64
	// directOff is set once a direct read failed with EINVAL: none is
	// tried again.
	directOff atomic.Bool
}

// targetState is what this Reader knows of a target's server: srv is its
// local socket (nil: not local, or not known yet); retryAt is when to ask
// again after it was found not local; probing while a probe runs.
type targetState struct {
	srv     *server
	retryAt time.Time
	probing bool
}

// Times of the probe.
const (
	// retryProbe is how long a target found not local (or whose socket
	// failed) is read over RPC before its server is asked again.
	retryProbe = 30 * time.Second
	// localTimeout bounds one exchange on a local socket.
	localTimeout = 5 * time.Second
	// maxIdle is how many idle connections to one socket are kept.
	maxIdle = 4
)

// New returns a Reader over c.
func New(c *storagerpc.Client, o Options) *Reader {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.DirectMin == 0:
		o.DirectMin = DefaultDirectMin
	case o.DirectMin < 0:
		o.DirectMin = 0
	}
	base, cancel := context.WithCancel(context.Background())
	return &Reader{Client: c, log: o.Logger, now: o.Now, cache: newFDCache(o.MaxOpen), directMin: o.DirectMin,
		bufs: bufpool.New(8, storagerpc.MaxIO), uid: os.Getuid(), base: base, cancel: cancel,
		targets: map[proto.TargetID]*targetState{}, servers: map[storagerpc.LocalInfo]*server{}}
}

// Counts is what a Reader did since New.
type Counts struct {
	Local    uint64 // reads served from local files
	Direct   uint64 // of those, the reads that bypassed the page cache (Options.DirectMin)
	Fallback uint64 // reads over RPC although their server is local (a checksum mismatch: a write under way, or corruption; a missing object; an error)
	Opens    uint64 // objects opened through local sockets
}

// Counts returns what the Reader did since New.
func (r *Reader) Counts() Counts {
	return Counts{Local: r.local.Load(), Direct: r.direct.Load(), Fallback: r.fallback.Load(), Opens: r.opens.Load()}
}

// OpenObjects is how many objects' descriptors are held.
func (r *Reader) OpenObjects() int { return r.cache.len() }

// Forget closes the descriptors of inode ino's objects (its file was
// closed: the client calls it when it drops the file's last handle).
func (r *Reader) Forget(ino proto.Ino) { r.cache.dropIno(ino) }

// Close closes every descriptor and idle connection; reads after it go to
// the Client.
func (r *Reader) Close() error {
	r.cancel()
	r.wg.Wait()
	r.cache.dropAll()
	r.mu.Lock()
	for _, s := range r.servers {
		s.closeIdle()
	}
	r.targets = map[proto.TargetID]*targetState{}
	r.mu.Unlock()
	return nil
}

// Read reads from the object's files when its server is on this host and
// everything checks; otherwise (and on any doubt) through the Client.
func (r *Reader) Read(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	if cap := proto.CapabilityFrom(ctx); len(cap) > 0 && r.base.Err() == nil {
		if srv := r.serverOf(t); srv != nil {
			n, err := r.readLocal(ctx, srv, t, obj, cap, off, p)
			if err == nil {
				r.local.Add(1)
				return n, nil
			}
			r.fallback.Add(1)
			r.log.Debug("localread: reading over RPC", "target", t, "object", obj, "off", off, "err", err)
		}
	}
	return r.Client.Read(ctx, t, obj, off, p)
}

// Errors of readLocal, all answered by reading over RPC.
var (
	errReplaced = errors.New("localread: the object's file was removed or replaced")
	errShort    = errors.New("localread: the object's file is shorter than it said")
	errNotSame  = errors.New("localread: the socket answers for another server")
)

// readLocal reads from obj's files, opening them first if needed.
func (r *Reader) readLocal(ctx context.Context, srv *server, t proto.TargetID, obj proto.ObjectID, cap []byte, off uint64, p []byte) (int, error) {
	k := key{t: t, obj: obj}
	uncached := proto.UncachedFrom(ctx)
	e := r.cache.get(k, cap, r.now())
	var head []byte
	if e == nil {
		var err error
		if e, head, err = r.open(ctx, srv, k, cap, off, p, uncached); err != nil {
			return 0, err
		}
		e = r.cache.put(e)
	}
	n, err := r.readEntry(e, off, p, uncached, head)
	if head != nil {
		r.bufs.Put(head)
	}
	r.cache.release(e)
	if err != nil && !errors.Is(err, storagerpc.ErrChecksum) {
		// A mismatch is most often a write under way: the descriptors
		// stay. Anything else: open again next time.
		r.cache.drop(e)
	}
	return n, err
}

// blocksOf returns the checksum blocks [b0, b1) that n bytes at off
// touch.
func blocksOf(off, n uint64) (b0, b1 uint64) {
	return off / storagerpc.SumBlock, (off + n + storagerpc.SumBlock - 1) / storagerpc.SumBlock
}

// readEntry reads [off, off+len(p)) of e's object, up to its end, and
// checks every block it touches against the sidecar (storagerpc.CheckBlocks:
// the rule the server reads by). uncached: the application asked for no
// page cache (proto.WithUncached). head, if not nil, is the start of the
// sidecar read when e was opened for this read: where it holds the
// blocks' entries, they are not read again.
func (r *Reader) readEntry(e *entry, off uint64, p []byte, uncached bool, head []byte) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(e.data, &st); err != nil {
		return 0, fmt.Errorf("localread: fstat: %w", err)
	}
	if st.Nlink == 0 {
		// Removed (a rebuild may remove and make it again): what it
		// holds may be old.
		return 0, errReplaced
	}
	size := uint64(st.Size)
	if off >= size || len(p) == 0 {
		return 0, nil
	}
	n := min(uint64(len(p)), size-off)
	end := off + n
	b0, b1 := blocksOf(off, n)
	spanOff, spanEnd := b0*storagerpc.SumBlock, min(b1*storagerpc.SumBlock, size)
	span := p[:n]
	if off != spanOff || end != spanEnd {
		// Blocks are checked whole: read them whole, aside.
		buf := r.bufs.Get(int(spanEnd - spanOff))
		defer r.bufs.Put(buf)
		span = buf
	}
	fd := e.data
	if r.directOK(span, spanOff, uncached) {
		if d := r.directFD(e); d >= 0 {
			fd = d
		}
	}
	err := preadFull(fd, span, int64(spanOff))
	if err != nil && fd != e.data && errors.Is(err, syscall.EINVAL) {
		// The file system took O_DIRECT at open but not this read (an
		// alignment it wants larger): read through the cache, and from
		// now on always.
		if r.directOff.CompareAndSwap(false, true) {
			r.log.Warn("localread: O_DIRECT reads refused, reading through the page cache", "err", err)
		}
		fd = e.data
		err = preadFull(fd, span, int64(spanOff))
	}
	if err != nil {
		return 0, err
	}
	if fd != e.data {
		r.direct.Add(1)
	}
	var sums []byte
	if from, to := storage.SidecarEntryOff(b0), storage.SidecarEntryOff(b1); to <= int64(len(head)) {
		sums = head[from:to]
	} else {
		sums = r.bufs.Get(int(8 * (b1 - b0)))
		defer r.bufs.Put(sums)
		got, err := pread(e.crc, sums, storage.SidecarEntryOff(b0))
		if err != nil {
			return 0, err
		}
		clear(sums[got:]) // entries past the sidecar's end are holes
	}
	if err := storagerpc.CheckBlocks(span, sums); err != nil {
		return 0, err
	}
	if &span[0] != &p[0] {
		copy(p[:n], span[off-spanOff:])
	}
	return int(n), nil
}

// directOK reports whether a read of span at off may bypass the page
// cache: large enough (any size for an uncached read), and offset, length
// and buffer aligned as O_DIRECT needs (a file's last, partial block is
// read through the cache).
func (r *Reader) directOK(span []byte, off uint64, uncached bool) bool {
	if !r.wantsDirect(len(span), uncached) {
		return false
	}
	return len(span)%DirectAlign == 0 && off%DirectAlign == 0 && uintptr(unsafe.Pointer(&span[0]))%DirectAlign == 0
}

// wantsDirect reports whether a read of n bytes is one to bypass the page
// cache where it can (directOK adds the alignment O_DIRECT needs): large
// enough, or uncached, and O_DIRECT reads not found refused.
func (r *Reader) wantsDirect(n int, uncached bool) bool {
	return r.directMin > 0 && !r.directOff.Load() && (uncached || n >= r.directMin)
}

// directFD returns e's O_DIRECT descriptor of the object's data file,
// opening it on first use, or -1 where there is none. It is a second
// open of the very file the server gave (through /proc/self/fd, so the
// same inode, and the same checks on every block): a descriptor's
// O_DIRECT flag belongs to its open file, and the cached reads keep the
// first. A file system without O_DIRECT (tmpfs before Linux 6.6), or a file this process
// may not open itself (a mount not run as root, a server's private
// files), leaves the entry with cached reads only.
func (r *Reader) directFD(e *entry) int {
	if fd, tried := e.directFD(); tried {
		return fd
	}
	d, err := syscall.Open("/proc/self/fd/"+strconv.Itoa(e.data), syscall.O_RDONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0)
	if err != nil {
		r.log.Debug("localread: no O_DIRECT reads of this object", "target", e.t, "object", e.obj, "err", err)
		e.direct.CompareAndSwap(0, -1)
	} else if !e.direct.CompareAndSwap(0, int32(d)+1) {
		syscall.Close(d) // another read opened it first
	}
	fd, _ := e.directFD()
	return fd
}

// pread reads at off until p is full or the file ends.
func pread(fd int, p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := syscall.Pread(fd, p[done:], off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, fmt.Errorf("localread: pread: %w", err)
		}
		if n == 0 {
			break
		}
		done += n
	}
	return done, nil
}

// preadFull reads all of p at off.
func preadFull(fd int, p []byte, off int64) error {
	n, err := pread(fd, p, off)
	if err != nil {
		return err
	}
	if n < len(p) {
		return fmt.Errorf("%w: %d of %d bytes at %d", errShort, n, len(p), off)
	}
	return nil
}

// headRead is how much of a sidecar open reads at once: its header and, in
// the same page, the entries of the object's first 508 blocks (just under
// 2 MiB), so that a first read there needs no second read of the sidecar.
const headRead = 4096

// open asks srv for k's files with cap, for a read of len(p) bytes at off
// (uncached: proto.WithUncached). It returns the entry and the start of
// the sidecar it read to check its header (from r.bufs; the caller puts it
// back): headRead bytes, or fewer at the sidecar's end, when the read's
// entries lie within them; else only the header's bytes.
func (r *Reader) open(ctx context.Context, srv *server, k key, cap []byte, off uint64, p []byte, uncached bool) (*entry, []byte, error) {
	c, err := capability.Parse(cap)
	if err != nil {
		return nil, nil, fmt.Errorf("localread: %w", err)
	}
	req := storagerpc.LocalReq{Op: storagerpc.LocalOpen, Cap: cap, ObjectReq: storagerpc.ObjectReq{Target: k.t, Obj: k.obj}}
	resp, fds, err := srv.exchange(ctx, req.Encode())
	if err == nil && resp.ID != srv.info.ID {
		err = errNotSame // the server restarted (or another took its path)
	}
	if err == nil && resp.Errno == 0 && len(fds) != 2 {
		err = fmt.Errorf("localread: %d descriptors for an object (want 2)", len(fds))
	}
	if err == nil && resp.Errno != 0 {
		err = fmt.Errorf("localread: %s: %w", resp.Msg, resp.Errno)
		if resp.Errno == syscall.ENOENT || resp.Errno == syscall.EACCES {
			closeFDs(fds)
			return nil, nil, err // a missing object, a refused capability: the RPC answers
		}
	}
	if err != nil {
		closeFDs(fds)
		r.lost(srv, err)
		return nil, nil, err
	}
	e := &entry{key: k, data: fds[0], crc: fds[1], cap: append([]byte(nil), cap...), expiry: c.Expiry}
	b0, b1 := blocksOf(off, uint64(len(p)))
	if len(p) > 0 && !r.wantsDirect(len(p), uncached) {
		// A read through the page cache of a file just opened is most
		// often cold (a small file read once): start its data's read now,
		// so that it overlaps the sidecar's below instead of following
		// it. Advice only: its failure changes nothing.
		from := int64(b0 * storagerpc.SumBlock)
		_ = unix.Fadvise(e.data, from, int64(b1*storagerpc.SumBlock)-from, unix.FADV_WILLNEED)
	}
	want := storage.SidecarHeaderSize
	if storage.SidecarEntryOff(b1) <= headRead {
		want = headRead
	}
	head := r.bufs.Get(want)
	n, err := pread(e.crc, head, 0)
	if err == nil && n < storage.SidecarHeaderSize {
		err = fmt.Errorf("%w: sidecar of %d bytes", errShort, n)
	}
	if err == nil {
		err = storage.CheckSidecarHeader(head[:n])
	}
	if err != nil {
		r.bufs.Put(head)
		closeFDs(fds)
		return nil, nil, fmt.Errorf("localread: sidecar header: %w", err)
	}
	r.opens.Add(1)
	return e, head[:n], nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// serverOf returns the local socket of target t's server, or nil while
// there is none (or it is not known yet: the first read of a target
// starts a probe in the background and goes over RPC).
func (r *Reader) serverOf(t proto.TargetID) *server {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := r.targets[t]
	if ts == nil {
		ts = &targetState{}
		r.targets[t] = ts
	}
	if ts.srv != nil || ts.probing || now.Before(ts.retryAt) {
		return ts.srv
	}
	ts.probing = true
	r.wg.Go(func() { r.probe(t, ts) })
	return nil
}

// probe asks target t's server for its local socket and checks that it
// answers here, as that server.
func (r *Reader) probe(t proto.TargetID, ts *targetState) {
	ctx, cancel := context.WithTimeout(r.base, localTimeout)
	defer cancel()
	srv, err := r.find(ctx, t)
	r.mu.Lock()
	defer r.mu.Unlock()
	ts.probing = false
	if err != nil {
		ts.retryAt = r.now().Add(retryProbe)
		r.log.Debug("localread: reading target over RPC", "target", t, "why", err)
		return
	}
	ts.srv = srv
	if !srv.announced {
		srv.announced = true
		r.log.Info("short-circuit local reads in use", "socket", srv.info.Path, "target", t)
	}
}

func (r *Reader) find(ctx context.Context, t proto.TargetID) (*server, error) {
	info, err := r.Client.LocalInfo(ctx, t)
	if err != nil {
		return nil, err
	}
	if info.Path == "" {
		return nil, errors.New("localread: the server has no local socket")
	}
	r.mu.Lock()
	srv := r.servers[info]
	if srv == nil {
		srv = &server{info: info, uid: r.uid}
		r.servers[info] = srv
	}
	r.mu.Unlock()
	resp, fds, err := srv.exchange(ctx, storagerpc.LocalReq{Op: storagerpc.LocalHello}.Encode())
	closeFDs(fds)
	if err != nil {
		return nil, err // no such socket here: another host's server
	}
	if resp.Errno != 0 {
		return nil, fmt.Errorf("localread: %s: %s: %w", info.Path, resp.Msg, resp.Errno)
	}
	if resp.ID != info.ID {
		return nil, fmt.Errorf("%w (%s)", errNotSame, info.Path)
	}
	return srv, nil
}

// lost forgets srv for every target after its socket failed or answered
// for another server: they are probed again after retryProbe.
func (r *Reader) lost(srv *server, err error) {
	r.log.Warn("localread: local socket failed; reading over RPC", "socket", srv.info.Path, "err", err)
	srv.closeIdle()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for _, ts := range r.targets {
		if ts.srv == srv {
			ts.srv, ts.retryAt = nil, now.Add(retryProbe)
		}
	}
	delete(r.servers, srv.info)
	srv.announced = false
}

// server is one storage server's local socket, with a few idle
// connections.
type server struct {
	info      storagerpc.LocalInfo
	uid       int
	announced bool // logged as in use (under Reader.mu)

	mu   sync.Mutex
	idle []*net.UnixConn
}

func (s *server) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.idle {
		c.Close()
	}
	s.idle = nil
}

// conn returns an idle connection or a new one, whose peer runs as root
// or as this process's user (anyone else could pass off any file).
func (s *server) conn() (*net.UnixConn, error) {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		c := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: s.info.Path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("localread: %w", err)
	}
	cred, err := storagerpc.PeerCred(c)
	if err == nil && cred.Uid != 0 && int(cred.Uid) != s.uid {
		err = fmt.Errorf("localread: %s is served by uid %d, neither root nor ours (%d)", s.info.Path, cred.Uid, s.uid)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (s *server) putIdle(c *net.UnixConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle) >= maxIdle {
		c.Close()
		return
	}
	s.idle = append(s.idle, c)
}

// exchange sends req and returns the answer and the descriptors that came
// with it (the caller closes them).
func (s *server) exchange(ctx context.Context, req []byte) (storagerpc.LocalResp, []int, error) {
	c, err := s.conn()
	if err != nil {
		return storagerpc.LocalResp{}, nil, err
	}
	dl := time.Now().Add(localTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	c.SetDeadline(dl)
	if _, _, err := c.WriteMsgUnix(req, nil, nil); err != nil {
		c.Close()
		return storagerpc.LocalResp{}, nil, fmt.Errorf("localread: %w", err)
	}
	buf := make([]byte, storagerpc.MaxLocalMessage)
	oob := make([]byte, syscall.CmsgSpace(4*4)) // room for more than the 2 sent
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		fds, _ = parseFDs(oob[:oobn])
	}
	switch {
	case err != nil:
	case n == 0 || err == io.EOF:
		err = io.ErrUnexpectedEOF
	case flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
		err = errors.New("localread: answer truncated")
	}
	var resp storagerpc.LocalResp
	if err == nil {
		resp, err = storagerpc.DecodeLocalResp(buf[:n])
	}
	if err != nil {
		closeFDs(fds)
		c.Close()
		return storagerpc.LocalResp{}, nil, fmt.Errorf("localread: %s: %w", s.info.Path, err)
	}
	s.putIdle(c)
	return resp, fds, nil
}

// parseFDs returns the descriptors of SCM_RIGHTS messages in oob.
func parseFDs(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != syscall.SOL_SOCKET || m.Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		got, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}
