package storagerpc

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"github.com/weft-fs/weft/internal/checks"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
)

// Short-circuit local reads (package storage/localread is the client side,
// storage's local.go the server side). A storage server may also listen
// on a Unix domain socket; a client on the same host asks it, once per
// object, for the object's data file and checksum sidecar, opened
// read-only, passed as descriptors (SCM_RIGHTS), and then reads them
// itself, checking every block against the sidecar as the server would.
//
//	OpLocalInfo 173  empty -> format u8 (1), path str ("" = no socket), id [16]byte
//
// The id is random per server process: every answer on the socket carries
// it, so a client knows the socket it reached is the one of the server it
// asked over TCP (and not a socket of the same path on another host, or of
// a server that restarted since).
//
// On the socket (SOCK_SEQPACKET: one message per request or answer):
//
//	request: format u8 (1), op u8, then for LocalOpen: cap, target u32, ino u64, stripe u32, gen u64
//	answer:  format u8 (1), errno u32 (0: done), id [16]byte, message str;
//	         to a LocalOpen that succeeded, two descriptors ride with it:
//	         the data file, then the sidecar, both O_RDONLY
//
// LocalHello asks for the answer alone (the id), to check the socket.
const (
	OpLocalInfo uint16 = 173

	LocalFormat = 1
	LocalHello  = 0
	LocalOpen   = 1

	// MaxLocalMessage bounds a message on the socket (a request is at
	// most 2 + 4 + MaxCapability + 24 bytes).
	MaxLocalMessage = 1024
	// LocalIDSize is the size of a server's random id.
	LocalIDSize = 16
)

// LocalInfo is what OpLocalInfo answers: the server's local socket and its
// id.
type LocalInfo struct {
	Path string
	ID   [LocalIDSize]byte
}

// Encode encodes an OpLocalInfo answer.
func (i LocalInfo) Encode() []byte {
	e := wire.NewEncoder(2 + len(i.Path) + LocalIDSize)
	e.U8(LocalFormat)
	e.String(i.Path)
	e.B = append(e.B, i.ID[:]...)
	return e.B
}

// DecodeLocalInfo decodes an OpLocalInfo answer.
func DecodeLocalInfo(b []byte) (LocalInfo, error) {
	d := wire.NewDecoder(b)
	if f := d.U8(); d.Err() == nil && f != LocalFormat {
		return LocalInfo{}, fmt.Errorf("storagerpc: local info of format %d (want %d)", f, LocalFormat)
	}
	i := LocalInfo{Path: d.StringMax(4096)}
	copy(i.ID[:], d.Remaining())
	if len(d.Remaining()) != LocalIDSize {
		return LocalInfo{}, fmt.Errorf("storagerpc: local info with an id of %d bytes (want %d)", len(d.Remaining()), LocalIDSize)
	}
	if err := d.Err(); err != nil {
		return LocalInfo{}, fmt.Errorf("storagerpc: local info: %w", err)
	}
	return i, nil
}

// LocalReq is a request on the local socket.
type LocalReq struct {
	Op  uint8
	Cap []byte // LocalOpen: the capability granting read
	ObjectReq
}

// Encode encodes a request on the local socket.
func (r LocalReq) Encode() []byte {
	e := wire.NewEncoder(32 + len(r.Cap))
	e.U8(LocalFormat)
	e.U8(r.Op)
	if r.Op == LocalOpen {
		e.Bytes(r.Cap)
		r.encode(e)
	}
	return e.B
}

// DecodeLocalReq decodes a request on the local socket. It never panics.
func DecodeLocalReq(b []byte) (LocalReq, error) {
	d := wire.NewDecoder(b)
	if f := d.U8(); d.Err() == nil && f != LocalFormat {
		return LocalReq{}, fmt.Errorf("storagerpc: local request of format %d (want %d)", f, LocalFormat)
	}
	r := LocalReq{Op: d.U8()}
	switch r.Op {
	case LocalHello:
	case LocalOpen:
		r.Cap = decodeCap(d)
		r.ObjectReq = decodeObject(d)
	default:
		if d.Err() == nil {
			return LocalReq{}, fmt.Errorf("storagerpc: unknown local request %d", r.Op)
		}
	}
	if err := d.Done(); err != nil {
		return LocalReq{}, fmt.Errorf("storagerpc: local request: %w", err)
	}
	return r, nil
}

// LocalResp is an answer on the local socket.
type LocalResp struct {
	Errno syscall.Errno // 0: done
	ID    [LocalIDSize]byte
	Msg   string // why, when Errno is set
}

// Encode encodes an answer on the local socket.
func (r LocalResp) Encode() []byte {
	msg := r.Msg
	if len(msg) > 512 {
		msg = msg[:512]
	}
	e := wire.NewEncoder(32 + len(msg))
	e.U8(LocalFormat)
	e.U32(uint32(r.Errno))
	e.B = append(e.B, r.ID[:]...)
	e.String(msg)
	return e.B
}

// DecodeLocalResp decodes an answer on the local socket. It never panics.
func DecodeLocalResp(b []byte) (LocalResp, error) {
	d := wire.NewDecoder(b)
	if f := d.U8(); d.Err() == nil && f != LocalFormat {
		return LocalResp{}, fmt.Errorf("storagerpc: local answer of format %d (want %d)", f, LocalFormat)
	}
	r := LocalResp{Errno: syscall.Errno(d.U32())}
	if rest := d.Remaining(); len(rest) >= LocalIDSize {
		copy(r.ID[:], rest)
		d = wire.NewDecoder(rest[LocalIDSize:])
	} else {
		return LocalResp{}, fmt.Errorf("storagerpc: local answer of %d bytes", len(b))
	}
	r.Msg = d.StringMax(512)
	if err := d.Done(); err != nil {
		return LocalResp{}, fmt.Errorf("storagerpc: local answer: %w", err)
	}
	return r, nil
}

// serveLocalInfo answers OpLocalInfo: to any authenticated peer (the path
// and id are no secret: the socket serves only its own host's root and
// server user, and each open needs a capability).
func (h *Handler) serveLocalInfo(ctx context.Context, req []byte) ([]byte, error) {
	if len(req) != 0 {
		return h.bad(OpLocalInfo, req, fmt.Errorf("storagerpc: local info request of %d bytes", len(req)))
	}
	if _, _, err := h.guard.trusted(ctx, OpLocalInfo); err != nil {
		return nil, err
	}
	return h.local.Encode(), nil
}

// AuthorizeLocal checks a request of the local socket to open obj for
// reading with the capability c, for the process described by who (its
// pid and uid, for the log). The socket's server has already checked the
// process's credentials (SO_PEERCRED: root or the server's own user, who
// can read the target's files anyway); the capability proves that the
// metadata service granted this read. Its holder, a certificate name,
// cannot be checked on a Unix socket and is not. A refusal is EACCES,
// logged as the handler's refusals are.
func (h *Handler) AuthorizeLocal(c []byte, obj proto.ObjectID, who string) error {
	p := transport.Peer{Addr: who, Role: transport.RoleClient}
	if checks.Off {
		return nil
	}
	if h.guard.key == nil {
		return h.guard.refuse(p, OpLocalInfo, "no capability key configured")
	}
	cp, err := h.guard.verify(c)
	if err == nil {
		err = cp.Allows(obj.Ino, obj.Gen, proto.AccessRead, cp.Holder)
	}
	if err != nil {
		return h.guard.refuse(p, OpLocalInfo, err.Error())
	}
	return nil
}

// PeerCred returns the credentials of the process at the other end of a
// local socket connection (SO_PEERCRED, as of its connect): both ends
// check them.
func PeerCred(c *net.UnixConn) (*syscall.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// LocalInfo asks target t's server for its local socket (OpLocalInfo).
func (c *Client) LocalInfo(ctx context.Context, t proto.TargetID) (LocalInfo, error) {
	resp, err := c.call(ctx, t, OpLocalInfo)
	if err != nil {
		return LocalInfo{}, err
	}
	i, err := DecodeLocalInfo(resp)
	if err != nil {
		return LocalInfo{}, fmt.Errorf("%w: %w", err, syscall.EIO)
	}
	return i, nil
}
