package storage

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/internal/ratelog"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/storage/vfs"
)

// Short-circuit local reads, the server side (the protocol is
// storagerpc's local.go; the client side is package storage/localread).
//
// A storage server given a local socket (Config.LocalSocket, `weft
// storage --local-socket PATH`) listens on it (SOCK_SEQPACKET, mode 0600)
// and serves only processes of its own host that run as root or as the
// server's own user (SO_PEERCRED), who can read the target directories
// anyway; anyone else gets EACCES and is logged. Each LocalOpen must
// carry a capability granting read on the object (checked by
// storagerpc.Handler.AuthorizeLocal, as the RPCs' are, bar the holder's
// certificate name, which a Unix socket cannot show); the answer carries
// the object's data file and its sidecar, opened O_RDONLY, as
// descriptors. The client reads them without locks and checks every
// block against the sidecar: a block a write is changing matches neither
// of its checksums, and the client then reads it with an RPC (which takes
// the lock and reports corruption). Nothing here takes an object's lock,
// and the server does not see (or count) the reads.

// localConns bounds the connections a local socket serves at once (each
// client keeps a few idle ones).
const localConns = 256

// localIdle closes a connection idle this long.
const localIdle = 10 * time.Minute

// newLocalID makes a server process's random id (storagerpc.LocalInfo).
func newLocalID() ([storagerpc.LocalIDSize]byte, error) {
	var id [storagerpc.LocalIDSize]byte
	_, err := rand.Read(id[:])
	return id, err
}

// localAuthorizer checks a LocalOpen's capability
// (storagerpc.Handler.AuthorizeLocal).
type localAuthorizer func(cap []byte, obj proto.ObjectID, who string) error

// localServer serves one local socket.
type localServer struct {
	ln       *net.UnixListener
	path     string
	id       [storagerpc.LocalIDSize]byte
	srv      *Server
	auth     localAuthorizer
	log      *slog.Logger
	uid      int
	refusals ratelog.Limiter
	slots    chan struct{}

	mu    sync.Mutex
	conns map[*net.UnixConn]struct{}
	wg    sync.WaitGroup
}

// maxSocketPath is the longest path a Unix socket may have (sun_path,
// less its terminating zero).
const maxSocketPath = 107

// listenLocal listens on path. A socket file left there by a server that
// died is replaced; one a running server answers on is not (EADDRINUSE).
func listenLocal(path string, id [storagerpc.LocalIDSize]byte, srv *Server, auth localAuthorizer, log *slog.Logger) (*localServer, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("storage: local socket %s: a path of %d bytes, at most %d: pick a shorter one", path, len(path), maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("storage: local socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("storage: local socket %s: a file that is not a socket is there: %w", path, syscall.EEXIST)
		}
		if c, err := net.Dial("unixpacket", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("storage: local socket %s: another server is listening on it: %w", path, syscall.EADDRINUSE)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("storage: local socket %s: removing the stale one: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("storage: local socket: %w", err)
	}
	// Only the owner (and root) may connect; SO_PEERCRED is checked too.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("storage: local socket: %w", err)
	}
	s := &localServer{ln: ln, path: path, id: id, srv: srv, auth: auth, log: log, uid: os.Getuid(),
		slots: make(chan struct{}, localConns), conns: map[*net.UnixConn]struct{}{}}
	s.wg.Go(s.accept)
	return s, nil
}

// Close stops listening (removing the socket file) and ends every
// connection.
func (s *localServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *localServer) accept() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("storage: local socket: accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.refuse(c, "", fmt.Sprintf("more than %d connections", localConns), syscall.EBUSY)
			c.Close()
			continue
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			s.serve(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
			<-s.slots
		})
	}
}

// serve answers c's requests, one at a time, until it closes.
func (s *localServer) serve(c *net.UnixConn) {
	cred, err := storagerpc.PeerCred(c)
	if err != nil {
		s.refuse(c, "", "no peer credentials: "+err.Error(), syscall.EACCES)
		return
	}
	who := fmt.Sprintf("local pid %d uid %d", cred.Pid, cred.Uid)
	if cred.Uid != 0 && int(cred.Uid) != s.uid {
		s.refuse(c, who, fmt.Sprintf("uid %d is neither root nor the server's (%d)", cred.Uid, s.uid), syscall.EACCES)
		return
	}
	buf := make([]byte, storagerpc.MaxLocalMessage)
	for {
		c.SetReadDeadline(time.Now().Add(localIdle))
		n, _, flags, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return // closed, idle, or gone
		}
		if flags&syscall.MSG_TRUNC != 0 {
			s.refuse(c, who, "request longer than the limit", syscall.EINVAL)
			return
		}
		req, err := storagerpc.DecodeLocalReq(buf[:n])
		if err != nil {
			s.refuse(c, who, err.Error(), syscall.EINVAL)
			return
		}
		var fds []int
		resp := storagerpc.LocalResp{ID: s.id}
		if req.Op == storagerpc.LocalOpen {
			fds, err = s.open(req, who)
			if err != nil {
				resp.Errno, resp.Msg = errnoOf(err), err.Error()
			}
		}
		var oob []byte
		if len(fds) > 0 {
			oob = syscall.UnixRights(fds...)
		}
		_, _, err = c.WriteMsgUnix(resp.Encode(), oob, nil)
		for _, fd := range fds {
			syscall.Close(fd) // the client has its own copies now
		}
		if err != nil {
			return
		}
	}
}

// open checks a LocalOpen and opens its object's data file and sidecar
// read-only. They are plain descriptors, not os.Files: they only pass
// through to the client, and an os.File would cost two system calls more
// each (the poller's registration, refused for a regular file, and the
// switch back to blocking mode that Fd makes), per small file read.
func (s *localServer) open(req storagerpc.LocalReq, who string) ([]int, error) {
	if err := s.auth(req.Cap, req.Obj, who); err != nil {
		return nil, err
	}
	t, err := s.srv.Target(req.Target)
	if err != nil {
		return nil, err
	}
	if t.fs != vfs.Default {
		return nil, fmt.Errorf("storage: target %s is not on the operating system's file system: %w", t.dir, syscall.EOPNOTSUPP)
	}
	path := t.objPath(req.Obj)
	data, err := openReadOnly(path)
	if err == syscall.ENOENT {
		return nil, fmt.Errorf("storage: object %s: %w", objName(req.Obj), syscall.ENOENT)
	}
	if err != nil {
		return nil, fmt.Errorf("storage: object %s: open %s: %w", objName(req.Obj), path, err)
	}
	crc, err := openReadOnly(path + ".crc")
	if err != nil {
		syscall.Close(data)
		if err == syscall.ENOENT {
			// A data file without its sidecar is new and empty, or
			// corrupt: the RPC read knows which.
			return nil, fmt.Errorf("storage: object %s has no sidecar: %w", objName(req.Obj), syscall.ENOENT)
		}
		return nil, fmt.Errorf("storage: object %s sidecar: open %s.crc: %w", objName(req.Obj), path, err)
	}
	return []int{data, crc}, nil
}

// openReadOnly opens path O_RDONLY, never following a symbolic link, and
// retries an open interrupted by a signal.
func openReadOnly(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// refuse answers an error (if the connection still takes one) and logs
// it, rate-limited.
func (s *localServer) refuse(c *net.UnixConn, who, why string, errno syscall.Errno) {
	s.refusals.Warn(s.log, "storage: local socket request refused", "peer", who, "why", why)
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.WriteMsgUnix(storagerpc.LocalResp{Errno: errno, ID: s.id, Msg: why}.Encode(), nil, nil)
}

// errnoOf is err's errno, EIO if it has none.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
