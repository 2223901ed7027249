package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Security makes the TCP transport authenticate both ends of every
// connection with TLS 1.3 and tell handlers who the peer is (Peer in their
// ctx). Package auth builds it from a key bundle; another transport (RDMA)
// can take the same value and do the same from outside this package:
// nothing in it is specific to TCP.
//
// The transport clones both configs and forces TLS 1.3 only and session
// tickets off; ServerTLS must require and verify client certificates
// against the cluster CA, ClientTLS must verify the server's chain against
// it (host names are not checked: cluster certificates are not per host).
type Security struct {
	// ServerTLS is used by listeners.
	ServerTLS *tls.Config
	// ClientTLS is used by Dial.
	ClientTLS *tls.Config
	// Identify returns the role and name a verified peer certificate
	// carries, or an error if it carries none.
	Identify func(cert *x509.Certificate) (Role, string, error)
	// Encrypt: on a client, ask for wire encryption; on a server, require
	// it of every connection. Without it (the default), frames travel in
	// the clear over the TCP connection once TLS has authenticated both
	// ends: a man-in-the-middle able to inject into TCP streams could
	// hijack an authenticated connection. Turn it on over untrusted
	// networks; it costs CPU on every byte (see docs/security.md).
	Encrypt bool
	// ServerRoles are the roles a server this transport dials may have.
	// Default: RoleStorage and RoleMeta, so a stolen client key can never
	// impersonate a server.
	ServerRoles []Role
	// AcceptRoles are the roles listeners serve; a peer with another role
	// is refused during the hello. Default: every role (servers authorize
	// each request by the peer's role).
	AcceptRoles []Role
}

// helloVersion is the version of the hello exchanged after the TLS
// handshake (and of the protocol behind it). Peers with different
// versions refuse each other with an error naming both. Version 2 moved
// the metadata service's restripe, scrub and lease ops (100..122) into
// its own range (1..99): they shared codes with storage ops.
const helloVersion uint16 = 2

// ProtocolVersion is the protocol version this build speaks (the hello's):
// a server refuses a peer of another version with an error naming both.
const ProtocolVersion = helloVersion

// The hello, both ways: magic "WFTH", version (uint16 LE), flags, status.
const (
	helloSize  = 8
	helloMagic = "WFTH"
	// flagEncrypt: from the client, "I want encryption"; from the server,
	// "frames go through TLS".
	flagEncrypt = 1
	// Server statuses.
	helloOK          = 0
	helloBadVersion  = 1
	helloRoleRefused = 2
)

// ErrAuth is wrapped (with syscall.EACCES) by the error of a Dial whose
// peer failed authentication, and by the server's reason for refusing one.
var ErrAuth = errors.New("authentication failed")

func authError(addr string, cause error) error {
	return fmt.Errorf("transport: %s: %w: %w: %w", addr, ErrAuth, syscall.EACCES, cause)
}

func encodeHello(b []byte, flags, status byte) {
	copy(b, helloMagic)
	binary.LittleEndian.PutUint16(b[4:], helloVersion)
	b[6], b[7] = flags, status
}

func decodeHello(b []byte) (version uint16, flags, status byte, err error) {
	if string(b[:4]) != helloMagic {
		return 0, 0, 0, fmt.Errorf("transport: bad hello magic %q", b[:4])
	}
	return binary.LittleEndian.Uint16(b[4:]), b[6], b[7], nil
}

// secured is a Security ready to use: configs cloned and forced to TLS
// 1.3 without tickets, defaults filled in.
type secured struct {
	server, client *tls.Config
	identify       func(*x509.Certificate) (Role, string, error)
	encrypt        bool
	serverRoles    []Role
	acceptRoles    []Role
}

func newSecured(s *Security) *secured {
	if s == nil {
		return nil
	}
	sc := &secured{identify: s.Identify, encrypt: s.Encrypt, serverRoles: s.ServerRoles, acceptRoles: s.AcceptRoles}
	if s.ServerTLS != nil {
		sc.server = s.ServerTLS.Clone()
		sc.server.MinVersion, sc.server.MaxVersion = tls.VersionTLS13, tls.VersionTLS13
		sc.server.SessionTicketsDisabled = true
		sc.server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if s.ClientTLS != nil {
		sc.client = s.ClientTLS.Clone()
		sc.client.MinVersion, sc.client.MaxVersion = tls.VersionTLS13, tls.VersionTLS13
		sc.client.SessionTicketsDisabled = true
		sc.client.ClientSessionCache = nil
	}
	if sc.serverRoles == nil {
		sc.serverRoles = []Role{RoleStorage, RoleMeta}
	}
	return sc
}

func (s *secured) peerIdentity(cs tls.ConnectionState) (Role, string, error) {
	if len(cs.PeerCertificates) == 0 {
		return RoleNone, "", errors.New("no peer certificate")
	}
	if s.identify == nil {
		return RoleNone, "", errors.New("transport: Security.Identify is not set")
	}
	return s.identify(cs.PeerCertificates[0])
}

// clientHandshake authenticates raw to the server at addr and exchanges
// the hello. It returns the conn frames go over: the tls.Conn when
// encrypted, else raw itself. The tls.Conn is never closed (that would
// write an alert into the frame stream); the caller closes raw.
//
// Ordering keeps the tls.Conn from buffering frame bytes: the client sends
// its hello and nothing more until it has read the server's answer, and
// the server sends nothing after its answer until a request arrives.
func (s *secured) clientHandshake(ctx context.Context, raw net.Conn, addr string, timeout time.Duration) (net.Conn, Peer, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = raw.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	ctxErr := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("transport: dial %s: %w (%w)", addr, ctxErrno(ctx), ctx.Err())
		}
		return err
	}

	tc := tls.Client(raw, s.client)
	if err := tc.HandshakeContext(ctx); err != nil {
		if isNetClosed(err) {
			return nil, Peer{}, ctxErr(fmt.Errorf("transport: %s: connection closed during the TLS handshake: %w: %w", addr, syscall.EIO, err))
		}
		return nil, Peer{}, ctxErr(authError(addr, err))
	}
	role, name, err := s.peerIdentity(tc.ConnectionState())
	if err != nil {
		return nil, Peer{}, authError(addr, err)
	}
	if !slices.Contains(s.serverRoles, role) {
		return nil, Peer{}, authError(addr, fmt.Errorf("server %q has role %q, not a server role (%v)", name, role, s.serverRoles))
	}
	var b [helloSize]byte
	flags := byte(0)
	if s.encrypt {
		flags = flagEncrypt
	}
	encodeHello(b[:], flags, 0)
	if _, err := tc.Write(b[:]); err != nil {
		return nil, Peer{}, ctxErr(helloReadError(addr, err))
	}
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		return nil, Peer{}, ctxErr(helloReadError(addr, err))
	}
	v, flags, status, err := decodeHello(b[:])
	if err != nil {
		return nil, Peer{}, fmt.Errorf("transport: %s: %w: %w", addr, syscall.EIO, err)
	}
	switch {
	case v != helloVersion || status == helloBadVersion:
		return nil, Peer{}, fmt.Errorf("transport: %s: server speaks protocol version %d, this client version %d: upgrade the older one: %w",
			addr, v, helloVersion, syscall.EPROTO)
	case status == helloRoleRefused:
		return nil, Peer{}, authError(addr, errors.New("the server does not serve this key's role"))
	case status != helloOK:
		return nil, Peer{}, fmt.Errorf("transport: %s: hello status %d: %w", addr, status, syscall.EIO)
	}
	// Once stop reports the watchdog will not run, no one else touches
	// the deadline; if it ran (ctx ended just now), it may set a past
	// deadline after any clearing of ours.
	if !stop() {
		return nil, Peer{}, ctxErr(fmt.Errorf("transport: dial %s: %w", addr, syscall.EIO))
	}
	_ = raw.SetDeadline(time.Time{})
	p := Peer{Addr: addr, Role: role, Name: name}
	if flags&flagEncrypt != 0 {
		return tc, p, nil
	}
	return raw, p, nil
}

// helloReadError classifies a failure to exchange the hello: a TLS alert
// from the server means it refused our certificate (TLS 1.3 clients finish
// their handshake before the server has checked them).
func helloReadError(addr string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return authError(addr, err)
	}
	return fmt.Errorf("transport: %s: connection closed during the hello (the server may be at its connection limit): %w: %w", addr, syscall.EIO, err)
}

func isNetClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// serverHandshake authenticates a new server connection and answers its
// hello, within the raw conn's deadline (set by the caller). See
// clientHandshake for the returned conn.
func (s *secured) serverHandshake(ctx context.Context, raw net.Conn) (net.Conn, Role, string, error) {
	tc := tls.Server(raw, s.server)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, RoleNone, "", fmt.Errorf("%w: TLS handshake: %w", ErrAuth, err)
	}
	role, name, err := s.peerIdentity(tc.ConnectionState())
	if err != nil {
		return nil, RoleNone, "", fmt.Errorf("%w: %w", ErrAuth, err)
	}
	var b [helloSize]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		return nil, role, name, fmt.Errorf("reading the hello: %w", err)
	}
	v, flags, _, err := decodeHello(b[:])
	if err != nil {
		return nil, role, name, err
	}
	if v != helloVersion {
		encodeHello(b[:], 0, helloBadVersion)
		_, _ = tc.Write(b[:])
		return nil, role, name, fmt.Errorf("client speaks protocol version %d, this server version %d", v, helloVersion)
	}
	if s.acceptRoles != nil && !slices.Contains(s.acceptRoles, role) {
		encodeHello(b[:], 0, helloRoleRefused)
		_, _ = tc.Write(b[:])
		return nil, role, name, fmt.Errorf("%w: role %q of %q is not served here (%v)", ErrAuth, role, name, s.acceptRoles)
	}
	encrypt := s.encrypt || flags&flagEncrypt != 0
	out := byte(0)
	if encrypt {
		out = flagEncrypt
	}
	encodeHello(b[:], out, helloOK)
	if _, err := tc.Write(b[:]); err != nil {
		return nil, role, name, fmt.Errorf("writing the hello: %w", err)
	}
	if encrypt {
		return tc, role, name, nil
	}
	return raw, role, name, nil
}

// rateLog logs at most a few lines per second; the next line it lets
// through counts those it suppressed.
type rateLog struct {
	log   *slog.Logger
	mu    sync.Mutex
	start time.Time
	n     int
	supp  int
}

const rateLogPerSecond = 5

func (r *rateLog) Warn(msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.start) >= time.Second {
		r.start, r.n = now, 0
	}
	if r.n >= rateLogPerSecond {
		r.supp++
		r.mu.Unlock()
		return
	}
	r.n++
	supp := r.supp
	r.supp = 0
	r.mu.Unlock()
	if supp > 0 {
		args = append(args, "suppressed", supp)
	}
	r.log.Warn(msg, args...)
}
