// Package transport moves request and response frames between weft
// processes. The Transport interface is what the rest of weft uses; TCP is the
// implementation today, and an RDMA transport can fill the same interface.
//
// Frames are multiplexed: many calls are in flight on one connection at once,
// each tagged with a request id, answered in any order.
//
// # Frame format
//
// Every frame is a 32-byte header followed by a body of the announced
// length. Integers are little-endian.
//
//	offset size field
//	     0    4 magic    "WEFT"
//	     4    1 version  1
//	     5    1 kind     1 = request, 2 = response
//	     6    2 op       operation (meta 1..99, storage 100..199, bench 200..299)
//	     8    8 id       request id, chosen by the client; the response echoes it
//	    16    4 status   responses: 0 = ok, else a syscall.Errno; requests: 0
//	    20    4 length   body bytes, at most MaxBody (72 MiB)
//	    24    4 reserved 0
//	    28    4 crc      CRC32C (Castagnoli) of bytes 0..27
//
// A request body is the concatenation of the parts given to Call. An ok
// response body is what the handler returned; an error response body is the
// error's message (at most 64 KiB). Bodies carry no checksum here: storage
// checksums data end to end.
//
// # Invariants
//
//   - A header is validated (magic, CRC, version, kind, reserved, length)
//     before anything is allocated for its body, so a hostile or corrupt
//     length can never make a peer allocate more than MaxBody. On the
//     server a body takes memory (and MaxBodyBytes budget) as its bytes
//     arrive, in a buffer of up to 1 MiB that grows fourfold as it fills,
//     so a frame that stalls pins about what was sent. Any malformed
//     or truncated frame is a protocol error: the receiver logs it (remote
//     address and reason) and closes that connection; other connections are
//     unaffected. The decoder never panics (FuzzDecodeHeader).
//   - At most one goroutine writes to a connection at a time. A caller (or,
//     on the server, the handler's goroutine with its response) that finds
//     the connection idle writes its frame itself at once with one writev,
//     so an uncontended call costs no goroutine hand-off on the way out;
//     having written, it also writes the small frames others queued
//     meanwhile. Under contention frames are queued and the connection's
//     writer goroutine sends everything queued with one writev (bodies of
//     256 KiB and more are always left to it). Body parts are never copied
//     and concurrent calls share system calls. Each connection has one
//     reader goroutine (buffered: 16 KiB on the client, so a large
//     response body is read almost all straight into its destination;
//     256 KiB on the server) that dispatches responses by id
//     on the client and, on the server, hands each request to an idle
//     handler goroutine of the connection, starting a new one when none is
//     idle (up to MaxInflight), so a slow handler never holds up the
//     others. Handler goroutines live on to take later requests (at most
//     16 idle per connection), which saves a goroutine start, and a
//     handler's stack growth, per request.
//   - A handler may end its response with bytes of a file (SendFile): the
//     writer sends them with sendfile(2) after writev of what precedes
//     them, from the page cache, never through the process; only on a
//     connection in the clear (an encrypted one must copy through TLS, and
//     SendFile says no). A file found shorter than promised is padded
//     with zeros, so the frame keeps its length. A caller may have a response
//     body read into two buffers, a head of known size and the rest
//     (WithResponseBuffers), e.g. checksums and the data they cover.
//   - Call returns only once the connection no longer reads the caller's
//     parts: a call abandoned while its request is queued is withdrawn
//     unsent; one abandoned mid-write (its own or the writer goroutine's)
//     waits for the write, at most a second, after which the connection is
//     closed. A caller blocked in its own write is abandoned the same way
//     when its ctx ends (context.AfterFunc).
//   - OpProbe (op 0) is answered by the transport server itself with an
//     empty ok response; handlers never see it.
//   - Call errors: the server's errno when the handler failed (a
//     *RemoteError, errors.Is(err, syscall.ENOENT), message printed);
//     syscall.ETIMEDOUT (and context.DeadlineExceeded) when ctx expired;
//     syscall.EINTR (and context.Canceled) when ctx was cancelled;
//     syscall.EIO, naming the address, when the connection broke or could
//     not be made; syscall.EMSGSIZE for a request over MaxBody. A broken
//     connection fails every call in flight on it and stays broken.
//   - A handler error maps to its syscall.Errno (errors.As), else EIO. A
//     handler panic is recovered, logged with its stack, and answered with
//     EIO; the server keeps serving.
//   - A server connection runs at most TCPOptions.MaxInflight (256) requests
//     at once, each holding its slot until its response is written; at the
//     limit the server stops reading that connection, so a client that does
//     not read its responses cannot make the server queue without bound.
//   - Every request's ctx carries the Peer (remote address, and with
//     Security the role and name of its certificate; RoleNone without).
//   - Handlers get a ctx cancelled when their connection ends or the
//     listener closes. Abandoning a call on the client does not cancel its
//     handler; the late response is read and dropped. Listener.Close closes
//     every connection and waits for all handlers, so handlers must return
//     once their ctx is done.
//
// # Security
//
// With TCPOptions.Security (built by package auth from a key bundle) every
// connection starts with a mutual TLS 1.3 handshake (no session tickets):
// the server requires a client certificate of the cluster CA; the client
// verifies the server's certificate against the CA and requires a server
// role (Security.ServerRoles, default storage and meta), so a client key
// can never pose as a server. Then an 8-byte hello each way inside TLS
// (magic "WFTH", protocol version, flags, status): the client says whether
// it wants encryption, the server whether frames will be encrypted (asked
// for, or required by its Security.Encrypt) or refuses (version mismatch,
// a role it does not accept: Security.AcceptRoles, default all). Without
// encryption frames then go over the raw TCP connection, in the clear;
// the client sends nothing after its hello until it has read the answer
// and the server nothing after its answer until a request arrives, so the
// tls.Conn holds no frame bytes, and it is never closed (the raw
// connection is). With encryption frames go through the tls.Conn. A
// dial whose peer fails authentication fails with EACCES and ErrAuth (the
// server refused our certificate: a TLS alert while reading its hello; or
// we refused its); a version mismatch with EPROTO naming both versions.
// The server logs every refused connection (remote address, reason) at
// warn, at most 5 lines a second with a count of those suppressed.
//
// # Resource bounds
//
// Each a TCPOptions field (zero: default, negative: none); see
// docs/security.md for the table.
//
//   - MaxConns (4096) connections per listener; over it, accepted and
//     closed at once. MaxConnsPerIP (512) connections of one remote IP, so
//     one host cannot take them all. MaxHandshakesPerIP (32) connections
//     of one remote IP still in the handshake.
//   - HandshakeTimeout (10 s) for TLS and hello, both ends.
//   - FrameTimeout (30 s): once a frame's first byte arrived, its header and
//     body must arrive within it, else the connection is closed.
//   - MaxBodyBytes (1 GiB): request-body bytes held by a transport's
//     listeners, from arrival until the handler returns; a reader that
//     finds it spent waits, at most until its FrameTimeout.
//   - WriteTimeout (60 s): a write of responses blocked that long closes
//     the connection (a client that stopped reading), freeing what its
//     handlers hold; with MaxInflight this bounds what one peer pins.
//   - IdleTimeout (10 min): a server connection with no request arriving
//     or in flight and no response written for that long is closed. A Pool
//     retires its own connections idle for PoolOptions.IdleTimeout (5 min)
//     before using them, atomically with respect to calls (a call racing
//     it finds the connection closed before sending and is retried), so
//     honest clients never see the server's close.
//
// # Pool
//
// Pool is what services use: it dials lazily, keeps ConnsPerAddr
// connections per address and spreads calls round-robin over them, drops a
// connection once it is broken and redials on the next call, so clients
// recover by themselves when a server comes back. Concurrent calls share one
// dial. A call is retried once on a new connection only if its request was
// never sent (the connection was found broken first); otherwise the error is
// returned, as operations need not be idempotent. A dial refused for
// authentication or protocol version (EACCES, EPROTO) is not retried: calls
// to that address fail at once with the same error for a second, and the
// address is not made suspect.
//
// An address becomes suspect when a call to it went unanswered until the
// caller's deadline (the call failed with ETIMEDOUT and
// context.DeadlineExceeded; a handler's own ETIMEDOUT or a cancelled call
// does not count), or a dial to it got no answer in time (a partitioned
// host drops the SYN): the server may be frozen (SIGSTOP, swapping) or cut
// off, which no connection error reveals. A deadline noticed more than a
// second after it passed does not count either: then this process was the
// one stopped (a mount continued after SIGSTOP), not the server. While an
// address is suspect every call to it
// fails at once with ETIMEDOUT naming the address, instead of each waiting
// out its own deadline. One background probe per suspect address dials a
// connection of its own and sends OpProbe, which the transport server
// answers without calling the handler, redialing every 200 ms while that
// connection fails; the first answer clears the suspicion, so calls work
// again as soon as the server's process runs again. (A server whose
// process runs but whose handlers hang answers probes, so its address is
// trusted again at once and calls wait out their own deadlines.) Close
// stops the probes.
package transport
