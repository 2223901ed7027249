package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/internal/testcluster"
	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// TestHostile runs the attacks of issue 7 against a real cluster, as an
// unprivileged user on a client host would: with weft's own packages
// (metarpc, storagerpc, transport) and hand-made frames. Every attack must
// fail with an authentication error, EACCES or EPERM, or stay within the
// documented resource bounds, and after each the mount (the honest client)
// must still write and read files, and root's files must be intact.
//
// The attacker speaks from 127.0.0.2 where the transport lets it choose its
// address (raw connections), so that the servers' logs and per-IP bounds can
// be told apart from the mount's 127.0.0.1.
func TestHostile(t *testing.T) {
	storageMetrics := freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{
		Servers: 1, Targets: 2,
		StorageArgs: []string{"--metrics", storageMetrics},
	})
	h := newHostile(t, c)
	h.storageMetrics = storageMetrics

	t.Run("KeyFiles", h.keyFiles)
	h.checkHonest(t)
	t.Run("NoKey", h.noKey)
	h.checkHonest(t)
	t.Run("ForeignKeys", h.foreignKeys)
	h.checkHonest(t)
	t.Run("Credentials", h.credentials)
	h.checkHonest(t)
	t.Run("ReleaseOthersHandle", h.releaseOthersHandle)
	h.checkHonest(t)
	t.Run("Capabilities", h.capabilities)
	h.checkHonest(t)
	t.Run("Registration", h.registration)
	h.checkHonest(t)
	t.Run("RootSquash", h.rootSquash)
	h.checkHonest(t)
	t.Run("StalledBodies", h.stalledBodies)
	h.checkHonest(t)
	t.Run("HandshakeFlood", h.handshakeFlood)
	h.checkHonest(t)
	t.Run("UnreadResponses", h.unreadResponses)
	h.checkHonest(t)
}

// attackerIP is the loopback address raw attack connections come from.
const attackerIP = "127.0.0.2"

// hostile is the cluster under attack and root's files in it.
type hostile struct {
	c   *testcluster.Cluster
	mnt string

	storageMetrics string // storage-0's --metrics address

	// The unprivileged user the attacker claims to be (and is, for cat).
	tests proto.Cred

	// Root's files, made through the mount:
	//   private/        0755 root
	//   private/secret  0600 root, secretData
	//   private/pub     0644 root, pubData
	//   private/victim  0644 root (to unlink)
	//   private/closed/ 0700 root, with closed/inner 0644
	//   tmp/            01777 root (where the attacker makes its own files)
	//   tmp/rootfile    0644 root
	private, secret, pub, victim, closed, tmp proto.Ino
	secretData, pubData                       []byte

	honestN int
}

func newHostile(t *testing.T, c *testcluster.Cluster) *hostile {
	t.Helper()
	u, err := user.Lookup("tests")
	if err != nil {
		t.Fatalf("user tests is missing (scripts/install-deps.sh makes it): %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	h := &hostile{c: c, mnt: c.Mount(0), tests: proto.Cred{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}}

	h.secretData = pattern(71, 0, 2<<20+5) // over both stripes of the default layout
	h.pubData = pattern(72, 0, 2<<20+7)
	mk := func(rel string, mode os.FileMode, data []byte) proto.Ino {
		p := filepath.Join(h.mnt, rel)
		var err error
		if data == nil {
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, data, 0o600)
		}
		if err == nil {
			err = os.Chmod(p, mode)
		}
		if err != nil {
			t.Fatal(err)
		}
		return inoOf(t, p)
	}
	h.private = mk("private", 0o755, nil)
	h.secret = mk("private/secret", 0o600, h.secretData)
	h.pub = mk("private/pub", 0o644, h.pubData)
	h.victim = mk("private/victim", 0o644, []byte("victim\n"))
	h.closed = mk("private/closed", 0o700, nil)
	mk("private/closed/inner", 0o644, []byte("inner\n"))
	h.tmp = mk("tmp", 0o777|os.ModeSticky, nil)
	mk("tmp/rootfile", 0o644, []byte("rootfile\n"))
	return h
}

// inoOf is the weft inode number of path: the FUSE adapter uses weft's
// inode numbers as the kernel's (fuse/node.go).
func inoOf(t testing.TB, path string) proto.Ino {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return proto.Ino(st.Ino)
}

// readFresh reads path through the mount after dropping its page cache,
// so that what comes back is what the storage targets hold now.
func readFresh(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// checkHonest checks that the mount still serves: a new file written and
// read back, and root's files unchanged.
func (h *hostile) checkHonest(t *testing.T) {
	t.Helper()
	h.honestN++
	p := filepath.Join(h.mnt, fmt.Sprintf("honest-%d", h.honestN))
	data := pattern(uint32(1000+h.honestN), 0, 1<<20+h.honestN)
	err := within(t, "honest write/read on the mount", func() error {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		got, err := readFresh(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("read back differs: %s", firstDiff(got, data))
		}
		for _, f := range []struct {
			name string
			want []byte
		}{{"private/secret", h.secretData}, {"private/pub", h.pubData}} {
			got, err := readFresh(filepath.Join(h.mnt, f.name))
			if err != nil {
				return err
			}
			if !bytes.Equal(got, f.want) {
				return fmt.Errorf("root's %s changed: %s", f.name, firstDiff(got, f.want))
			}
		}
		return os.Remove(p)
	})
	if err != nil {
		t.Fatalf("the honest client after the attacks so far: %v", err)
	}
}

// bundle loads the bundle in dir as an attacker holding it would.
func bundle(t testing.TB, dir string) *auth.Keys {
	t.Helper()
	k, err := auth.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// attacker is a set of weft clients over one transport (nil security:
// no key).
type attacker struct {
	pool    *transport.Pool
	meta    *metarpc.Client
	storage *storagerpc.Client
}

func newAttacker(t testing.TB, c *testcluster.Cluster, sec *transport.Security) *attacker {
	t.Helper()
	var tr transport.Transport
	if sec == nil {
		tr = transport.NewTCP()
	} else {
		tr = transport.NewTCPWith(transport.TCPOptions{Security: sec})
	}
	pool := transport.NewPool(tr, transport.PoolOptions{DialTimeout: 10 * time.Second})
	t.Cleanup(func() { pool.Close() })
	storageAddr := c.StorageAddr(0) // the only storage server holds every target
	a := &attacker{
		pool:    pool,
		meta:    metarpc.NewClient(pool, c.MetaAddr(), metarpc.WithSession(proto.NewSessionID())),
		storage: storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return storageAddr, nil }),
	}
	// A client opens a session before it opens files, as a mount does;
	// anyone with a client key may. Without a valid key this fails like
	// everything else (the subtests check those refusals themselves).
	if sec != nil {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		_, _ = a.meta.OpenSession(ctx, nil)
	}
	return a
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// objects returns the stripe objects of the file at path, with their
// targets, from its layout.
func (h *hostile) objects(t testing.TB, rel string) (ino proto.Ino, tgts []proto.TargetID, objs []proto.ObjectID) {
	t.Helper()
	p := filepath.Join(h.mnt, rel)
	ino = inoOf(t, p)
	l, err := testcluster.GetLayout(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Targets) == 0 {
		t.Fatalf("%s has no targets in its layout %+v", rel, l)
	}
	// The generation that names the objects is not visible through the
	// mount; a client-key holder asks the metadata server (GetAttr needs
	// no permission beyond the lookup, which a key holder skips).
	a, err := h.clientAttacker(t).meta.GetAttr(proto.WithCred(ctxT(t), proto.RootCred), ino)
	if err != nil {
		t.Fatalf("GetAttr of %s: %v", rel, err)
	}
	for i, tg := range l.Targets {
		tgts = append(tgts, proto.TargetID(tg))
		objs = append(objs, proto.ObjectID{Ino: ino, Gen: a.Gen, Stripe: uint32(i)})
	}
	return ino, tgts, objs
}

// objectFiles returns the data files of ino's objects in the target
// directories (storage's on-disk format: objects/<low byte>/<ino>.<gen>.<stripe>).
func (h *hostile) objectFiles(ino proto.Ino) []string {
	var out []string
	for _, td := range h.c.AllTargetDirs() {
		m, _ := filepath.Glob(filepath.Join(td, "objects", fmt.Sprintf("%02x", uint64(ino)&0xff), fmt.Sprintf("%d.*", ino)))
		for _, f := range m {
			if !strings.HasSuffix(f, ".crc") {
				out = append(out, f)
			}
		}
	}
	return out
}

// wantErrno fails unless err matches one of errnos.
func wantErrno(t testing.TB, what string, err error, errnos ...syscall.Errno) {
	t.Helper()
	for _, e := range errnos {
		if errors.Is(err, e) {
			return
		}
	}
	t.Errorf("%s: got %v, want %v", what, err, errnos)
}

// waitUntil polls cond every 50 ms until it returns "" (done); after
// hangGuard it fails with cond's last explanation.
func waitUntil(t testing.TB, cond func() string) {
	t.Helper()
	d := hangGuard
	deadline := time.Now().Add(d)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---- 1. key files ----

// keyFiles: the cluster's private keys are 0600 and user tests cannot
// read them; a bundle whose private key others may read is refused, saying
// chmod 600.
func (h *hostile) keyFiles(t *testing.T) {
	var keys []string
	for _, role := range []string{"meta", "storage", "client"} {
		keys = append(keys, filepath.Join(h.c.Keys(role), "node.key"))
	}
	keys = append(keys, filepath.Join(h.c.Keys("meta"), "capability.key"), filepath.Join(h.c.Keys("storage"), "capability.key"),
		filepath.Join(h.c.Keys("ca"), "ca.key"), filepath.Join(h.c.Keys("ca"), "capability.key"))
	for _, k := range keys {
		fi, err := os.Stat(k)
		if err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", k, fi.Mode().Perm())
		}
		out, err := exec.Command("setpriv", "--reuid=tests", "--regid=tests", "--clear-groups", "cat", k).CombinedOutput()
		if err == nil || bytes.Contains(out, []byte("PRIVATE KEY")) || len(out) >= 64 && !bytes.Contains(out, []byte("denied")) {
			t.Errorf("user tests read %s (err %v): %q", k, err, out)
		} else if !bytes.Contains(out, []byte("Permission denied")) {
			t.Errorf("cat %s as tests failed, but not for permission: %v %q", k, err, out)
		}
	}

	// A copy whose private key file is 0644 is refused, saying what to do.
	for _, c := range []struct{ role, file string }{{"client", "node.key"}, {"storage", "capability.key"}} {
		dir := filepath.Join(t.TempDir(), c.role)
		copyBundle(t, h.c.Keys(c.role), dir)
		if err := os.Chmod(filepath.Join(dir, c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := auth.Load(dir)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("auth.Load of a %s bundle with %s 0644: %v, want a refusal saying chmod 600", c.role, c.file, err)
		}
	}
}

// copyBundle copies a bundle directory, keeping the files' modes.
func copyBundle(t testing.TB, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// ---- 2. no key ----

// frameHeader is a weft request frame header (transport/doc.go), made by
// hand as an attacker would.
func frameHeader(op uint16, id uint64, length uint32) []byte {
	b := make([]byte, transport.HeaderSize)
	binary.LittleEndian.PutUint32(b[0:], transport.Magic)
	b[4] = transport.Version
	b[5] = 1 // request
	binary.LittleEndian.PutUint16(b[6:], op)
	binary.LittleEndian.PutUint64(b[8:], id)
	binary.LittleEndian.PutUint32(b[20:], length)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// dialFrom opens a TCP connection to addr from the attacker's address.
func dialFrom(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(attackerIP)}}
	return d.Dial("tcp", addr)
}

// noKey: a client without keys (plain TCP, frames in the clear) gets
// nothing from the meta or storage server, changes nothing, and both log
// the refusal with its address.
func (h *hostile) noKey(t *testing.T) {
	ctx := ctxT(t)
	a := newAttacker(t, h.c, nil)

	// A request frame sent in the clear from the attacker's address, until
	// the server's log shows its refusal with that address (the log is
	// rate-limited: retry if the line was suppressed).
	for _, srv := range []struct{ name, addr string }{{"meta", h.c.MetaAddr()}, {"storage-0", h.c.StorageAddr(0)}} {
		waitUntil(t, func() string {
			nc, err := dialFrom(srv.addr)
			if err != nil {
				return err.Error()
			}
			defer nc.Close()
			nc.Write(frameHeader(metarpc.OpGetAttr, 1, 0))
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(nc)
			if bytes.Contains(b, []byte("WEFT")) || len(b) > 0 && !bytes.HasPrefix(b, []byte{0x15}) {
				// A TLS alert (0x15) is all a server may answer.
				t.Errorf("%s answered a keyless client with %d bytes: %q", srv.name, len(b), b[:min(len(b), 64)])
			}
			seen := nc.LocalAddr().String()
			for _, line := range strings.Split(h.c.Log(srv.name), "\n") {
				if strings.Contains(line, "refusing connection") && strings.Contains(line, "remote="+seen) {
					return ""
				}
			}
			return fmt.Sprintf("%s logged no refusal of %s", srv.name, seen)
		})
	}

	// Through weft's own client over transport.NewTCP: the server hangs
	// up during the TLS handshake, which this client sees as EIO. The
	// client retries a numbered request (Open) on EIO until its deadline,
	// as it would against a server that is down: a short one here.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cr := proto.WithCred(short, proto.RootCred)
	attr, err := a.meta.Lookup(cr, h.private, "secret")
	if err == nil || attr.Ino != 0 {
		t.Errorf("keyless Lookup of root's secret: %+v, %v", attr, err)
	}
	t.Logf("keyless Lookup: %v", err)
	if attr, err := a.meta.GetAttr(cr, h.secret); err == nil || attr.Ino != 0 {
		t.Errorf("keyless GetAttr of root's secret: %+v, %v", attr, err)
	}
	if _, _, err := a.meta.Open(cr, h.secret, proto.AccessRead); err == nil {
		t.Errorf("keyless Open of root's secret succeeded")
	}

	ino, tgts, objs := h.objects(t, "private/secret")
	for i, obj := range objs {
		buf := make([]byte, 1<<20)
		n, err := a.storage.Read(ctx, tgts[i], obj, 0, buf)
		if err == nil || n != 0 || !bytes.Equal(buf, make([]byte, len(buf))) {
			t.Errorf("keyless Read of %v: %d bytes, %v", obj, n, err)
		}
		if _, err := a.storage.Write(ctx, tgts[i], obj, 0, []byte("PWNED")); err == nil {
			t.Errorf("keyless Write of %v succeeded", obj)
		}
		if err := a.storage.RemoveMany(ctx, tgts[i], []proto.ObjectID{obj}); err == nil {
			t.Errorf("keyless RemoveMany of %v succeeded", obj)
		}
	}
	if got := h.objectFiles(ino); len(got) != len(objs) {
		t.Errorf("secret's objects on the targets: %v, want %d", got, len(objs))
	}
}

// ---- 3. another cluster's keys ----

// foreignKeys: bundles of another cluster (client and storage) are refused
// at the handshake (EACCES) for every call, and a storage server run with
// one never registers.
func (h *hostile) foreignKeys(t *testing.T) {
	foreign := testcluster.GenerateKeys(t)
	_, tgts, objs := h.objects(t, "private/secret")
	for _, role := range []string{"client", "storage", "meta"} {
		a := newAttacker(t, h.c, bundle(t, filepath.Join(foreign, role)).Security(false))
		ctx := proto.WithCred(ctxT(t), proto.RootCred)
		_, err := a.meta.Lookup(ctx, h.private, "secret")
		wantErrno(t, role+" Lookup", err, syscall.EACCES)
		_, err = a.meta.GetAttr(ctx, h.secret)
		wantErrno(t, role+" GetAttr", err, syscall.EACCES)
		_, err = a.meta.Mkdir(ctx, proto.RootIno, "foreign", 0o777, 0, 0)
		wantErrno(t, role+" Mkdir", err, syscall.EACCES)
		_, err = a.meta.RegisterTarget(ctx, "foreign-target", proto.TargetInfo{Addr: h.c.StorageAddr(0), Total: 1 << 40, Free: 1 << 40})
		wantErrno(t, role+" RegisterTarget", err, syscall.EACCES)
		buf := make([]byte, 4096)
		n, err := a.storage.Read(ctx, tgts[0], objs[0], 0, buf)
		wantErrno(t, role+" Read", err, syscall.EACCES)
		if n != 0 {
			t.Errorf("%s Read returned %d bytes", role, n)
		}
		_, err = a.storage.Write(ctx, tgts[0], objs[0], 0, []byte("PWNED"))
		wantErrno(t, role+" Write", err, syscall.EACCES)
		err = a.storage.RemoveMany(ctx, tgts[0], objs[:1])
		wantErrno(t, role+" RemoveMany", err, syscall.EACCES)
	}
	if _, err := os.Stat(filepath.Join(h.mnt, "foreign")); !os.IsNotExist(err) {
		t.Errorf("foreign Mkdir left something: %v", err)
	}

	// A rogue storage server with the foreign storage bundle.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rogue := exec.CommandContext(ctx, h.c.Bin(), "storage", "--listen", freeAddr(t), "--meta", h.c.MetaAddr(),
		"--keys", filepath.Join(foreign, "storage"), "--target", t.TempDir(), "--log-level", "warn")
	rlog := &testutil.LogBuffer{}
	rogue.Stdout, rogue.Stderr = rlog, rlog
	if err := rogue.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { rogue.Process.Kill(); rogue.Wait() }()
	waitUntil(t, func() string {
		if strings.Contains(rlog.String(), "authentication failed") {
			return ""
		}
		return "the rogue storage server reported no authentication failure:\n" + rlog.String()
	})
	h.checkTargets(t)
}

// checkTargets checks that weft df lists exactly the cluster's targets, all
// on its storage server.
func (h *hostile) checkTargets(t *testing.T) {
	t.Helper()
	df, err := testcluster.DF(h.mnt)
	if err != nil {
		t.Fatal(err)
	}
	if len(df) != h.c.NumTargets() {
		t.Errorf("df lists %d targets, want %d: %+v", len(df), h.c.NumTargets(), df)
	}
	for _, ti := range df {
		if ti.Addr != h.c.StorageAddr(0) || !ti.Up {
			t.Errorf("df lists target %+v, not the cluster's storage server %s", ti, h.c.StorageAddr(0))
		}
	}
}

// ---- 4. credentials checked by the meta server ----

func (h *hostile) clientAttacker(t testing.TB) *attacker {
	return newAttacker(t, h.c, bundle(t, h.c.Keys("client")).Security(false))
}

// credentials: with a valid client key, claiming to be user tests, the
// attacker can do nothing to root's files that tests could not do on a
// local file system.
func (h *hostile) credentials(t *testing.T) {
	a := h.clientAttacker(t)
	ctx := proto.WithCred(ctxT(t), h.tests)

	// Root's 0600 file: no open, no capability, not through create.
	for _, want := range []proto.Access{proto.AccessRead, proto.AccessWrite, proto.AccessExec} {
		_, cap, err := a.meta.Open(ctx, h.secret, want)
		wantErrno(t, "Open secret "+want.String(), err, syscall.EACCES)
		if cap != nil {
			t.Errorf("Open secret %v returned a capability", want)
		}
		_, err = a.meta.Capability(ctx, h.secret, want)
		wantErrno(t, "Capability secret "+want.String(), err, syscall.EACCES)
	}
	_, _, cap, err := a.meta.CreateOpen(ctx, proto.CreateIn{Parent: h.private, Name: "secret", Mode: syscall.S_IFREG | 0o644}, proto.AccessRead)
	wantErrno(t, "CreateOpen of existing secret", err, syscall.EACCES)
	if cap != nil {
		t.Errorf("CreateOpen of root's secret returned a capability")
	}
	_, err = a.meta.Capability(ctx, h.pub, proto.AccessWrite)
	wantErrno(t, "write Capability of root's 0644 pub", err, syscall.EACCES)

	// Root's 0755 directory: no unlink, rename, create.
	err = a.meta.Unlink(ctx, h.private, "victim")
	wantErrno(t, "Unlink victim", err, syscall.EACCES)
	_, err = a.meta.UnlinkAt(ctx, h.private, "victim")
	wantErrno(t, "UnlinkAt victim", err, syscall.EACCES)
	err = a.meta.Rename(ctx, h.private, "victim", h.tmp, "stolen", 0)
	wantErrno(t, "Rename victim away", err, syscall.EACCES)
	_, err = a.meta.Create(ctx, proto.CreateIn{Parent: h.private, Name: "evil", Mode: syscall.S_IFREG | 0o644, Exclusive: true})
	wantErrno(t, "Create in private", err, syscall.EACCES)
	_, _, _, err = a.meta.CreateOpen(ctx, proto.CreateIn{Parent: h.private, Name: "evil", Mode: syscall.S_IFREG | 0o644}, proto.AccessWrite)
	wantErrno(t, "CreateOpen in private", err, syscall.EACCES)
	_, err = a.meta.Mkdir(ctx, h.private, "evil", 0o777, 0, 0)
	wantErrno(t, "Mkdir in private", err, syscall.EACCES)
	_, err = a.meta.Symlink(ctx, h.private, "evil", "/etc/shadow", 0, 0)
	wantErrno(t, "Symlink in private", err, syscall.EACCES)
	// Root's 0700 directory: no lookup, no listing.
	_, err = a.meta.Lookup(ctx, h.closed, "inner")
	wantErrno(t, "Lookup in root's 0700 directory", err, syscall.EACCES)
	ents, err := a.meta.ReadDir(ctx, h.closed, "", 100)
	wantErrno(t, "ReadDir of root's 0700 directory", err, syscall.EACCES)
	if len(ents) != 0 {
		t.Errorf("ReadDir of root's 0700 directory listed %d entries", len(ents))
	}
	// The sticky 1777 tmp: root's file there cannot be removed, renamed
	// away or replaced by tests.
	err = a.meta.Unlink(ctx, h.tmp, "rootfile")
	wantErrno(t, "Unlink root's file in a sticky directory", err, syscall.EPERM)
	err = a.meta.Rename(ctx, h.tmp, "rootfile", h.tmp, "taken", 0)
	wantErrno(t, "Rename root's file in a sticky directory", err, syscall.EPERM)
	if _, err := a.meta.Create(ctx, proto.CreateIn{Parent: h.tmp, Name: "decoy", Mode: syscall.S_IFREG | 0o644, Exclusive: true}); err != nil {
		t.Fatalf("tests creating its own file in the 1777 tmp: %v", err)
	}
	err = a.meta.Rename(ctx, h.tmp, "decoy", h.tmp, "rootfile", 0)
	wantErrno(t, "Rename over root's file in a sticky directory", err, syscall.EPERM)
	err = a.meta.Rename(ctx, h.tmp, "decoy", h.tmp, "rootfile", proto.RenameExchange)
	wantErrno(t, "exchange with root's file in a sticky directory", err, syscall.EPERM)
	if got, err := readFresh(filepath.Join(h.mnt, "tmp/rootfile")); err != nil || string(got) != "rootfile\n" {
		t.Errorf("root's tmp/rootfile after the attacks: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(h.mnt, "private/victim")); err != nil {
		t.Errorf("root's victim after the attacks: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(h.mnt, "private/evil")); !os.IsNotExist(err) {
		t.Errorf("private/evil after the attacks: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(h.mnt, "tmp/stolen")); !os.IsNotExist(err) {
		t.Errorf("tmp/stolen after the attacks: %v", err)
	}

	// Its own file, created asking for uid 0: owned by tests all the same;
	// then no chown to root, before or after setting setuid.
	mine, err := a.meta.Create(ctx, proto.CreateIn{Parent: h.tmp, Name: "mine", Mode: syscall.S_IFREG | 0o644, Uid: 0, Gid: 0, Exclusive: true})
	if err != nil {
		t.Fatalf("tests creating its own file in the 1777 tmp: %v", err)
	}
	if mine.Uid != h.tests.Uid || mine.Gid != h.tests.Gid {
		t.Errorf("file created by tests asking for uid 0: owned by %d:%d", mine.Uid, mine.Gid)
	}
	_, err = a.meta.SetAttr(ctx, mine.Ino, proto.SetAttrIn{Valid: proto.SetUid, Uid: 0})
	wantErrno(t, "chown own file to root", err, syscall.EPERM)
	_, err = a.meta.SetAttr(ctx, mine.Ino, proto.SetAttrIn{Valid: proto.SetGid, Gid: 0})
	wantErrno(t, "chgrp own file to root's group", err, syscall.EPERM)
	if _, err := a.meta.SetAttr(ctx, mine.Ino, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o4755}); err != nil {
		t.Errorf("chmod 04755 of its own file: %v", err)
	}
	_, err = a.meta.SetAttr(ctx, mine.Ino, proto.SetAttrIn{Valid: proto.SetUid | proto.SetGid, Uid: 0, Gid: 0})
	wantErrno(t, "chown setuid file to root", err, syscall.EPERM)
	if at, err := a.meta.GetAttr(ctx, mine.Ino); err != nil || at.Uid != h.tests.Uid || at.Gid != h.tests.Gid {
		t.Errorf("own file after chown attempts: %+v, %v", at, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(h.mnt, "tmp/mine"), &st); err != nil || st.Uid != h.tests.Uid {
		t.Errorf("tmp/mine through the mount: uid %d, %v", st.Uid, err)
	}

	// Root's files: no chmod, truncate, xattrs, times, layout, size.
	_, err = a.meta.SetAttr(ctx, h.pub, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o666})
	wantErrno(t, "chmod root's pub", err, syscall.EPERM)
	_, err = a.meta.SetAttr(ctx, h.secret, proto.SetAttrIn{Valid: proto.SetUid, Uid: h.tests.Uid})
	wantErrno(t, "chown root's secret to tests", err, syscall.EPERM)
	for _, ino := range []proto.Ino{mine.Ino, h.pub, h.secret} {
		for _, name := range []string{"trusted.weft.evil", "security.evil"} {
			err = a.meta.SetXattr(ctx, ino, name, []byte("x"), 0)
			wantErrno(t, fmt.Sprintf("set %s on inode %d", name, ino), err, syscall.EPERM)
		}
	}
	err = a.meta.SetXattr(ctx, h.pub, "user.evil", []byte("x"), 0)
	wantErrno(t, "set user.evil on root's pub", err, syscall.EACCES)
	y2000 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	before, err := a.meta.GetAttr(ctx, h.pub)
	if err != nil {
		t.Fatal(err)
	}
	for _, ino := range []proto.Ino{h.pub, h.secret} {
		_, err = a.meta.SetAttr(ctx, ino, proto.SetAttrIn{Valid: proto.SetAtime | proto.SetMtime, Atime: y2000, Mtime: y2000})
		wantErrno(t, "set root's times to 2000", err, syscall.EPERM)
		_, err = a.meta.SetAttr(ctx, ino, proto.SetAttrIn{Valid: proto.SetAtimeNow | proto.SetMtimeNow})
		wantErrno(t, "touch root's file", err, syscall.EACCES)
		_, err = a.meta.SetAttr(ctx, ino, proto.SetAttrIn{Valid: proto.SetSize | proto.SetHandle, Size: 0})
		wantErrno(t, "truncate root's file", err, syscall.EACCES)
		_, err = a.meta.WriteDone(ctx, ino, 1<<40, 0, proto.NoBlocks)
		wantErrno(t, "WriteDone on root's file", err, syscall.EACCES, syscall.EPERM)
		_, err = a.meta.SetLayout(ctx, ino, layout.Layout{StripeSize: 1 << 20, StripeCount: 1})
		wantErrno(t, "SetLayout of root's file", err, syscall.EACCES, syscall.EPERM)
	}
	// A read-only handle on root's 0644 file lends no write rights.
	if _, _, err := a.meta.Open(ctx, h.pub, proto.AccessRead); err != nil {
		t.Fatalf("tests opening root's 0644 pub for reading: %v", err)
	}
	_, err = a.meta.SetAttr(ctx, h.pub, proto.SetAttrIn{Valid: proto.SetSize | proto.SetHandle, Size: 0})
	wantErrno(t, "ftruncate through a read-only handle", err, syscall.EACCES)
	_, err = a.meta.WriteDone(ctx, h.pub, 1<<40, 0, proto.NoBlocks)
	wantErrno(t, "WriteDone through a read-only handle", err, syscall.EACCES, syscall.EPERM)
	if err := a.meta.Release(ctx, h.pub); err != nil {
		t.Errorf("Release of its own handle: %v", err)
	}
	after, err := a.meta.GetAttr(ctx, h.pub)
	if err != nil || after.Mtime != before.Mtime || after.Atime != before.Atime || after.Size != before.Size || after.Mode != before.Mode {
		t.Errorf("root's pub changed: before %+v, after %+v (%v)", before, after, err)
	}
	if names, err := a.meta.ListXattr(proto.WithCred(ctx, proto.RootCred), h.pub); err != nil || len(names) != 0 {
		t.Errorf("xattrs of root's pub: %q, %v", names, err)
	}
}

// ---- 4b. open handles belong to their session ----

// releaseOthersHandle: releasing root's open handle from another session,
// as tests or as a client's root, changes nothing: the file stays readable
// through root's descriptor after root unlinks it, and goes away only once
// root closes it.
func (h *hostile) releaseOthersHandle(t *testing.T) {
	a := h.clientAttacker(t)
	root := proto.WithCred(ctxT(t), proto.RootCred)
	ctx := proto.WithCred(ctxT(t), h.tests)

	p := filepath.Join(h.mnt, "private/held")
	data := pattern(73, 0, 1<<20+3)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ino := inoOf(t, p)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	many := make([]proto.Ino, 1000)
	for i := range many {
		many[i] = ino
	}
	release := func() {
		for _, c := range []context.Context{ctx, root} {
			if err := a.meta.ReleaseMany(c, many); err != nil {
				t.Errorf("ReleaseMany: %v", err)
			}
			for i := 0; i < 10; i++ {
				if err := a.meta.Release(c, ino); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		}
	}
	release()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	release()

	// A control orphan, reclaimed after the attack's releases: once it
	// is gone, an orphan the attack had released would be gone too (the
	// reclaim queue is FIFO).
	cp := filepath.Join(h.mnt, "private/control")
	if err := os.WriteFile(cp, []byte("control"), 0o644); err != nil {
		t.Fatal(err)
	}
	cino := inoOf(t, cp)
	cf, err := os.Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(cp); err != nil {
		t.Fatal(err)
	}
	cf.Close()
	waitUntil(t, func() string {
		_, err := a.meta.GetAttr(root, cino)
		if errors.Is(err, syscall.ENOENT) {
			return ""
		}
		return fmt.Sprintf("the control orphan is still there (%v)", err)
	})

	if at, err := a.meta.GetAttr(root, ino); err != nil || at.Nlink != 0 {
		t.Errorf("root's open, unlinked file after the attack: %+v, %v", at, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data)+1)
	n, err := f.ReadAt(got, 0)
	if n != len(data) || !bytes.Equal(got[:n], data) {
		t.Errorf("root's fd on its unlinked file after the attack: %d bytes (%v): %s", n, err, firstDiff(got[:n], data))
	}
	f.Close()
	waitUntil(t, func() string {
		_, err := a.meta.GetAttr(root, ino)
		if errors.Is(err, syscall.ENOENT) {
			return ""
		}
		return fmt.Sprintf("root's unlinked file still there after its close (%v)", err)
	})
}

// ---- 5. capabilities checked by storage ----

// capabilities: with a valid client key, storage serves no object of
// root's files without a capability for it: none, one for another inode,
// a read-only one for a write, a forged or altered one. Clients never
// remove objects.
func (h *hostile) capabilities(t *testing.T) {
	a := h.clientAttacker(t)
	ctx := proto.WithCred(ctxT(t), h.tests)

	// Legitimate capabilities: its own file (read-write), root's 0644 pub
	// (read).
	mineAttr, _, mineCap, err := a.meta.CreateOpen(ctx, proto.CreateIn{Parent: h.tmp, Name: "mine-cap", Mode: syscall.S_IFREG | 0o644, Exclusive: true}, proto.AccessReadWrite)
	if err != nil || mineCap == nil {
		t.Fatalf("CreateOpen of its own file: %v (capability %d bytes)", err, len(mineCap))
	}
	defer a.meta.Release(ctx, mineAttr.Ino)
	_, pubCap, err := a.meta.Open(ctx, h.pub, proto.AccessRead)
	if err != nil || pubCap == nil {
		t.Fatalf("Open of root's 0644 pub for reading: %v", err)
	}
	defer a.meta.Release(ctx, h.pub)

	// The capabilities work where they should (so the refusals below are
	// the checks, not a broken client).
	if len(mineAttr.Layout.Targets) == 0 {
		t.Fatalf("its own new file has no targets: %+v", mineAttr)
	}
	mineTgt := mineAttr.Layout.Targets[0]
	mineObj := proto.ObjectID{Ino: mineAttr.Ino, Gen: mineAttr.Gen}
	if _, err := a.storage.Write(proto.WithCapability(ctx, mineCap), mineTgt, mineObj, 0, []byte("mine")); err != nil {
		t.Errorf("Write of its own object with its capability: %v", err)
	}
	_, pubTgts, pubObjs := h.objects(t, "private/pub")
	buf := make([]byte, 4096)
	if n, err := a.storage.Read(proto.WithCapability(ctx, pubCap), pubTgts[0], pubObjs[0], 0, buf); err != nil || !bytes.Equal(buf[:n], h.pubData[:4096]) {
		t.Errorf("Read of root's pub with a read capability: %d bytes, %v", n, err)
	}

	// A forged capability: the right format, signed with another
	// cluster's key; and an altered one: mineCap naming secret's inode.
	foreign := bundle(t, filepath.Join(testcluster.GenerateKeys(t), "storage"))
	fkey, err := capability.NewKey(0, foreign.CapabilityKey())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	forged, err := fkey.Sign(capability.Capability{Ino: h.secret, Rights: proto.AccessReadWrite, Issued: now, Expiry: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	altered := alterIno(t, mineCap, mineAttr.Ino, h.secret)

	secretIno, secretTgts, secretObjs := h.objects(t, "private/secret")
	for _, c := range []struct {
		name string
		cap  []byte
	}{{"no capability", nil}, {"another inode's", mineCap}, {"forged", forged}, {"altered", altered}, {"root's pub, read-only", pubCap}} {
		cctx := proto.WithCapability(ctx, c.cap)
		for i, obj := range secretObjs {
			tg := secretTgts[i]
			what := fmt.Sprintf("%s, object %v", c.name, obj)
			buf := make([]byte, 1<<20)
			n, err := a.storage.Read(cctx, tg, obj, 0, buf)
			wantErrno(t, what+": Read", err, syscall.EACCES)
			if n != 0 || !bytes.Equal(buf, make([]byte, len(buf))) {
				t.Errorf("%s: Read returned %d bytes", what, n)
			}
			_, err = a.storage.Write(cctx, tg, obj, 0, []byte("PWNED"))
			wantErrno(t, what+": Write", err, syscall.EACCES)
			err = a.storage.Truncate(cctx, tg, obj, 0)
			wantErrno(t, what+": Truncate", err, syscall.EACCES)
			err = a.storage.Sync(cctx, tg, obj)
			wantErrno(t, what+": Sync", err, syscall.EACCES)
			err = a.storage.Remove(cctx, tg, obj)
			wantErrno(t, what+": Remove", err, syscall.EACCES)
			err = a.storage.RemoveMany(cctx, tg, []proto.ObjectID{obj})
			wantErrno(t, what+": RemoveMany", err, syscall.EACCES)
			err = a.storage.Space(cctx, tg, obj, proto.SpacePunch, 0, 1<<20)
			wantErrno(t, what+": Space (punch)", err, syscall.EACCES)
			_, err = a.storage.Seek(cctx, tg, obj, 0, proto.SeekData)
			wantErrno(t, what+": Seek", err, syscall.EACCES)
			_, err = a.storage.Allocated(cctx, tg, obj)
			wantErrno(t, what+": Allocated", err, syscall.EACCES)
			// Copying secret into its own object (its own capability for
			// the destination, this one for the source) is reading it.
			err = a.storage.Copy(proto.WithCapability(ctx, mineCap), mineTgt, mineObj, 0, tg, obj, 0, 4096, c.cap)
			wantErrno(t, what+": Copy out of secret", err, syscall.EACCES)
			// And copying its own bytes over secret is writing it.
			err = a.storage.Copy(cctx, tg, obj, 0, mineTgt, mineObj, 0, 4, mineCap)
			wantErrno(t, what+": Copy over secret", err, syscall.EACCES)
		}
	}
	// The read capability of pub allows no write to pub either, and no
	// capability lets a client remove objects, not even its own.
	pctx := proto.WithCapability(ctx, pubCap)
	for i, obj := range pubObjs {
		_, err = a.storage.Write(pctx, pubTgts[i], obj, 0, []byte("PWNED"))
		wantErrno(t, "Write of pub with its read capability", err, syscall.EACCES)
		err = a.storage.Truncate(pctx, pubTgts[i], obj, 0)
		wantErrno(t, "Truncate of pub with its read capability", err, syscall.EACCES)
		err = a.storage.RemoveMany(pctx, pubTgts[i], []proto.ObjectID{obj})
		wantErrno(t, "RemoveMany of pub with its read capability", err, syscall.EACCES)
	}
	err = a.storage.RemoveMany(proto.WithCapability(ctx, mineCap), mineTgt, []proto.ObjectID{mineObj})
	wantErrno(t, "RemoveMany of its own object", err, syscall.EACCES)

	if got := h.objectFiles(secretIno); len(got) != len(secretObjs) {
		t.Errorf("secret's objects on the targets: %v, want %d", got, len(secretObjs))
	}
	// checkHonest (after the subtest) reads secret and pub back fresh.
}

// alterIno returns cap with its inode number (found by value) replaced.
func alterIno(t testing.TB, cap []byte, from, to proto.Ino) []byte {
	t.Helper()
	var f [8]byte
	binary.LittleEndian.PutUint64(f[:], uint64(from))
	i := bytes.Index(cap, f[:])
	if i < 0 {
		t.Fatalf("inode %d not found in its capability %x", from, cap)
	}
	out := bytes.Clone(cap)
	binary.LittleEndian.PutUint64(out[i:], uint64(to))
	if c, err := capability.Parse(out); err != nil || c.Ino != to {
		t.Fatalf("altered capability: %+v, %v", c, err)
	}
	return out
}

// ---- 6. target registration ----

// registration: a client key cannot register or take over a target, nor
// run a storage server; a storage key of another name cannot take over a
// target; implausible or unreachable targets are refused.
func (h *hostile) registration(t *testing.T) {
	ctx := ctxT(t)
	uuid, id := targetIdentity(t, h.c.TargetDirs(0)[0])
	black := freeAddr(t) // nothing listens there

	a := h.clientAttacker(t)
	_, err := a.meta.RegisterTarget(ctx, "rogue-target", proto.TargetInfo{Addr: h.c.StorageAddr(0), Total: 1 << 40, Free: 1 << 40})
	wantErrno(t, "RegisterTarget with a client key", err, syscall.EACCES)
	_, err = a.meta.RegisterTarget(ctx, uuid, proto.TargetInfo{ID: id, Addr: black, Total: 1 << 40, Free: 1 << 40})
	wantErrno(t, "re-registering a real target with a client key", err, syscall.EACCES)

	// A storage bundle of this cluster under another name (a compromised
	// or misconfigured storage host).
	rogueKeys := filepath.Join(t.TempDir(), "rogue")
	if err := auth.Issue(h.c.Keys("ca"), transport.RoleStorage, "rogue", rogueKeys); err != nil {
		t.Fatal(err)
	}
	r := newAttacker(t, h.c, bundle(t, rogueKeys).Security(false))
	_, err = r.meta.RegisterTarget(ctx, uuid, proto.TargetInfo{ID: id, Addr: black, Total: 1 << 40, Free: 1 << 40})
	wantErrno(t, "taking over a real target's uuid", err, syscall.EPERM)
	_, err = r.meta.RegisterTarget(ctx, "rogue-huge", proto.TargetInfo{Addr: h.c.StorageAddr(0), Total: 1 << 60, Free: 1 << 60})
	wantErrno(t, "registering a 1 EiB target", err, syscall.EINVAL)
	_, err = r.meta.RegisterTarget(ctx, "rogue-blackhole", proto.TargetInfo{Addr: black, Total: 1 << 40, Free: 1 << 40})
	wantErrno(t, "registering a target at an address that does not answer", err, syscall.EHOSTUNREACH)
	h.checkTargets(t)

	// weft storage with the client bundle stops at start, naming the role.
	sctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := exec.CommandContext(sctx, h.c.Bin(), "storage", "--listen", freeAddr(t), "--meta", h.c.MetaAddr(),
		"--keys", h.c.Keys("client"), "--target", t.TempDir()).CombinedOutput()
	if err == nil || sctx.Err() != nil {
		t.Errorf("weft storage with a client bundle: %v, %s", err, out)
	}
	if !bytes.Contains(out, []byte("for role client")) || !bytes.Contains(out, []byte("needs a storage bundle")) {
		t.Errorf("weft storage with a client bundle does not say what is wrong: %s", out)
	}
	h.checkTargets(t)
}

// targetIdentity reads a target directory's uuid and id.
func targetIdentity(t testing.TB, dir string) (string, proto.TargetID) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "target.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		UUID string `json:"uuid"`
		ID   uint32 `json:"id"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.UUID == "" || v.ID == 0 {
		t.Fatalf("target.json %q: %v", b, err)
	}
	return v.UUID, proto.TargetID(v.ID)
}

// ---- 7. root squash ----

// rootSquash: on a cluster whose meta server squashes root, a client's uid
// 0 cannot read another user's 0600 file, chmod it or create in root's
// directories; the same call without squash (this cluster) can.
func (h *hostile) rootSquash(t *testing.T) {
	sq := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 1, Mounts: -1, MetaArgs: []string{"--root-squash"}})
	user := proto.Cred{Uid: 4242, Gid: 4242}
	setup := func(c *testcluster.Cluster, name string) (cl *metarpc.Client, dir proto.Ino, f proto.Attr) {
		// A server key is never squashed: use it to make a world-writable
		// directory; then user 4242 makes a 0600 file in it.
		srv := newAttacker(t, c, bundle(t, c.Keys("meta")).Security(false))
		ctx := proto.WithCred(ctxT(t), proto.RootCred)
		waitUntil(t, func() string {
			ts, err := srv.meta.Targets(ctx)
			if err != nil || len(ts) == 0 || !ts[0].Up {
				return fmt.Sprintf("no target up: %+v, %v", ts, err)
			}
			return ""
		})
		d, err := srv.meta.Mkdir(ctx, proto.RootIno, name, 0o777, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.meta.SetAttr(ctx, d.Ino, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
		cl = newAttacker(t, c, bundle(t, c.Keys("client")).Security(false)).meta
		f, err = cl.Create(proto.WithCred(ctxT(t), user), proto.CreateIn{Parent: d.Ino, Name: "f", Mode: syscall.S_IFREG | 0o600, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		return cl, d.Ino, f
	}

	cl, dir, f := setup(sq, "users")
	root := proto.WithCred(ctxT(t), proto.RootCred)
	_, _, err := cl.Open(root, f.Ino, proto.AccessRead)
	wantErrno(t, "squashed root opening user's 0600 file", err, syscall.EACCES)
	_, err = cl.Capability(root, f.Ino, proto.AccessRead)
	wantErrno(t, "squashed root asking a capability", err, syscall.EACCES)
	_, err = cl.SetAttr(root, f.Ino, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o644})
	wantErrno(t, "squashed root chmod", err, syscall.EPERM)
	_, err = cl.SetAttr(root, f.Ino, proto.SetAttrIn{Valid: proto.SetUid, Uid: 0})
	wantErrno(t, "squashed root chown", err, syscall.EPERM)
	err = cl.SetXattr(root, f.Ino, "trusted.evil", []byte("x"), 0)
	wantErrno(t, "squashed root setting trusted.*", err, syscall.EPERM)
	_, err = cl.Mkdir(root, proto.RootIno, "evil", 0o755, 0, 0)
	wantErrno(t, "squashed root mkdir in /", err, syscall.EACCES)
	// What squashed root creates is nobody's.
	if a, err := cl.Create(root, proto.CreateIn{Parent: dir, Name: "by-root", Mode: syscall.S_IFREG | 0o644, Exclusive: true}); err != nil || a.Uid != 65534 {
		t.Errorf("file created by squashed root: uid %d, %v", a.Uid, err)
	}
	// The honest user is served.
	if _, _, err := cl.Open(proto.WithCred(ctxT(t), user), f.Ino, proto.AccessReadWrite); err != nil {
		t.Errorf("user 4242 opening its own file under root squash: %v", err)
	}

	// Without root squash the same client root may.
	cl2, _, f2 := setup(h.c, "users")
	if _, _, err := cl2.Open(root, f2.Ino, proto.AccessRead); err != nil {
		t.Errorf("unsquashed client root opening user's 0600 file: %v", err)
	}
}

// ---- resources ----

// procStatus returns a field of /proc/PID/status in bytes (kB fields).
func procStatus(t testing.TB, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s of %d: %q", field, pid, v)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func (h *hostile) pid(t testing.TB, name string) int {
	t.Helper()
	pid, ok := h.c.PIDs()[name]
	if !ok {
		t.Fatalf("%s is not running", name)
	}
	return pid
}

// authConn opens a connection to addr from the attacker's address,
// authenticated with k, ready for frames: the TLS 1.3 handshake and the
// hello (transport/security.go) done by hand, frames in the clear after.
func authConn(t testing.TB, k *auth.Keys, addr string) net.Conn {
	t.Helper()
	raw, err := dialFrom(addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := k.Security(false).ClientTLS.Clone()
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS13, tls.VersionTLS13
	cfg.SessionTicketsDisabled = true
	tc := tls.Client(raw, cfg)
	raw.SetDeadline(time.Now().Add(time.Minute))
	hello := []byte{'W', 'F', 'T', 'H', byte(transport.ProtocolVersion), byte(transport.ProtocolVersion >> 8), 0, 0} // this version, no encryption, status ok
	var resp [8]byte
	if err := tc.Handshake(); err == nil {
		if _, err = tc.Write(hello); err == nil {
			_, err = io.ReadFull(tc, resp[:])
		}
	}
	if err != nil || !bytes.Equal(resp[:], hello) {
		raw.Close()
		t.Fatalf("authenticated connection to %s: %v (hello %q)", addr, err, resp)
	}
	raw.SetDeadline(time.Time{})
	return raw // never close tc: that writes an alert into the frame stream
}

// stalledBodies: 100 authenticated connections to each server that announce
// a 72 MiB request body, send 512 KiB of it and stall, do not make the
// server hold 100 x 72 MiB; the mount keeps working meanwhile.
func (h *hostile) stalledBodies(t *testing.T) {
	k := bundle(t, h.c.Keys("client"))
	const conns, sent = 100, 512 << 10
	body := make([]byte, sent)
	for _, srv := range []struct {
		name, addr string
		op         uint16
	}{{"meta", h.c.MetaAddr(), metarpc.OpSetXattr}, {"storage-0", h.c.StorageAddr(0), storagerpc.OpWrite}} {
		pid := h.pid(t, srv.name)
		rss0, vm0 := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmSize")
		var ncs []net.Conn
		for i := 0; i < conns; i++ {
			nc := authConn(t, k, srv.addr)
			ncs = append(ncs, nc)
			if _, err := nc.Write(append(frameHeader(srv.op, 1, transport.MaxBody), body...)); err != nil {
				t.Fatal(err)
			}
		}
		// Wait until the server has read everything sent (its sockets'
		// receive queues are empty), then measure.
		waitUntil(t, func() string { return serverReadAll(srv.addr, ncs) })
		h.checkHonest(t)
		rss, vm := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmSize")
		t.Logf("%s with %d stalled 72 MiB bodies (%d KiB sent each): RSS %+d MiB, VmSize %+d MiB", srv.name, conns, sent>>10, (rss-rss0)>>20, (vm-vm0)>>20)
		if rss-rss0 > 512<<20 {
			t.Errorf("%s: RSS grew by %d MiB with %d stalled bodies", srv.name, (rss-rss0)>>20, conns)
		}
		if vm-vm0 > 2<<30 {
			t.Errorf("%s: virtual memory grew by %d MiB with %d stalled bodies (72 MiB each reserved up front?)", srv.name, (vm-vm0)>>20, conns)
		}
		for _, nc := range ncs {
			nc.Close()
		}
	}
}

// tcpConns parses /proc/net/tcp: for each connection, local and remote
// address (as /proc writes them: hex IP:port) with state and queues.
type tcpConn struct {
	local, remote string
	state         int
	txq, rxq      int64
}

func readTCP(t testing.TB) []tcpConn {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var out []tcpConn
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		st, _ := strconv.ParseInt(f[3], 16, 32)
		q := strings.SplitN(f[4], ":", 2)
		tx, _ := strconv.ParseInt(q[0], 16, 64)
		rx, _ := strconv.ParseInt(q[1], 16, 64)
		out = append(out, tcpConn{local: f[1], remote: f[2], state: int(st), txq: tx, rxq: rx})
	}
	return out
}

// procAddr writes an IPv4 host:port as /proc/net/tcp does (x86: the
// address's bytes little-endian).
func procAddr(hostport string) string {
	ap, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil {
		return hostport
	}
	ip := ap.IP.To4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port)
}

// serverReadAll returns "" once the server end of every one of ncs has an
// empty receive queue (the server process read all we sent).
func serverReadAll(server string, ncs []net.Conn) string {
	ours := map[string]bool{}
	for _, nc := range ncs {
		ours[procAddr(nc.LocalAddr().String())] = true
	}
	srv := procAddr(server)
	b, _ := os.ReadFile("/proc/net/tcp")
	pending, seen := 0, 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[1] != srv || !ours[f[2]] {
			continue
		}
		seen++
		if q := strings.SplitN(f[4], ":", 2); len(q) == 2 && strings.TrimLeft(q[1], "0") != "" {
			pending++
		}
	}
	if seen != len(ncs) || pending > 0 {
		return fmt.Sprintf("%d of %d connections to %s seen, %d with unread bytes", seen, len(ncs), server, pending)
	}
	return ""
}

// handshakeFlood: 2,000 TCP connections from one address that never start
// the TLS handshake leave the meta server with a bounded number of
// descriptors (MaxHandshakesPerIP of them in the handshake) and serving.
func (h *hostile) handshakeFlood(t *testing.T) {
	const n = 2000
	// The documented default of TCPOptions.MaxHandshakesPerIP, written
	// out: the test checks the documented bound, not whatever the
	// constant says.
	const maxHandshaking = 32
	pid := h.pid(t, "meta")
	fds0 := countFDs(t, pid)
	var ncs []net.Conn
	defer func() {
		for _, nc := range ncs {
			nc.Close()
		}
	}()
	for i := 0; i < n; i++ {
		nc, err := dialFrom(h.c.MetaAddr())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		ncs = append(ncs, nc)
	}
	// The server has decided on every connection once each is either
	// closed by it or one of the few it keeps in the handshake.
	srv := procAddr(h.c.MetaAddr())
	waitUntil(t, func() string {
		open := 0
		for _, c := range readTCP(t) {
			// Our end, still established (state 1): the server kept it.
			if c.remote == srv && strings.HasPrefix(c.local, procAddr(attackerIP + ":0")[:8]) && c.state == 1 {
				open++
			}
		}
		if open > maxHandshaking {
			return fmt.Sprintf("%d flood connections still open (the server has not caught up, or keeps more than %d)", open, maxHandshaking)
		}
		return ""
	})
	h.checkHonest(t)
	fds := countFDs(t, pid)
	t.Logf("meta descriptors: %d before, %d during a flood of %d connections", fds0, fds, n)
	if fds > fds0+maxHandshaking+32 {
		t.Errorf("meta holds %d descriptors during the flood, %d before", fds, fds0)
	}
	// The refusals are logged with the attacker's address (rate-limited:
	// knock again, while the flood holds its handshake slots, until a line
	// gets through).
	waitUntil(t, func() string {
		for _, line := range strings.Split(h.c.Log("meta"), "\n") {
			if strings.Contains(line, "MaxHandshakesPerIP") && strings.Contains(line, "remote="+attackerIP+":") {
				return ""
			}
		}
		if nc, err := dialFrom(h.c.MetaAddr()); err == nil {
			ncs = append(ncs, nc)
		}
		return "meta logged no refusal of the flood"
	})
}

func countFDs(t testing.TB, pid int) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// unreadResponses: 100 pipelined 16 MiB reads on one authenticated
// connection whose responses are never read pin at most the connection's
// read budget (64 MiB) in the storage server; the mount keeps working.
func (h *hostile) unreadResponses(t *testing.T) {
	ctx := ctxT(t)
	p := filepath.Join(h.mnt, "big")
	if _, err := h.c.Weft(ctx, "setstripe", "-c", "1", p); err != nil {
		t.Fatal(err)
	}
	const size = storagerpc.MaxIO
	if err := os.WriteFile(p, pattern(74, 0, size), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	_, tgts, objs := h.objects(t, "big")
	// A client host's root opening root's file: a legitimate capability.
	a := h.clientAttacker(t)
	root := proto.WithCred(ctx, proto.RootCred)
	_, cap, err := a.meta.Open(root, objs[0].Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer a.meta.Release(root, objs[0].Ino)

	pid := h.pid(t, "storage-0")
	rss0 := procStatus(t, pid, "VmRSS")
	fams := scrape(t, h.storageMetrics)
	arrived0 := value(fams, "weft_rpc_server_requests_total", "read")
	ended0 := value(fams, "weft_rpc_server_seconds", "read")

	nc := authConn(t, bundle(t, h.c.Keys("client")), h.c.StorageAddr(0))
	defer nc.Close()
	const n = 100
	req := storagerpc.ReadReq{Cap: cap, ObjectReq: storagerpc.ObjectReq{Target: tgts[0], Obj: objs[0]}, Len: size}.Encode()
	var frames []byte
	for i := 0; i < n; i++ {
		frames = append(frames, frameHeader(storagerpc.OpRead, uint64(i+1), uint32(len(req)))...)
		frames = append(frames, req...)
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	// Wait until every read has arrived (requests are counted as they
	// start) and those the connection's budget allows have been served
	// (the handler returned; the rest wait for budget, in flight).
	budgetReads := float64(storagerpc.DefaultReadBytesPerConn / size)
	var served, inflight float64
	waitUntil(t, func() string {
		fams := scrape(t, h.storageMetrics)
		arrived := value(fams, "weft_rpc_server_requests_total", "read") - arrived0
		served = value(fams, "weft_rpc_server_seconds", "read") - ended0
		inflight = value(fams, "weft_rpc_server_inflight", "")
		if arrived < n || served < budgetReads {
			return fmt.Sprintf("storage has had %v of the %d reads, served %v, %v in flight", arrived, n, served, inflight)
		}
		return ""
	})
	rss1 := procStatus(t, pid, "VmRSS")
	h.checkHonest(t)
	rss2 := procStatus(t, pid, "VmRSS")
	t.Logf("storage with %d unread 16 MiB reads: %v served, %v waiting; RSS %+d MiB, after the mount's check %+d MiB", n, served, inflight, (rss1-rss0)>>20, (rss2-rss0)>>20)
	if growth := max(rss1, rss2) - rss0; growth > 256<<20 {
		t.Errorf("storage RSS grew by %d MiB with %d unread 16 MiB reads", growth>>20, n)
	}
	if served > budgetReads+4 {
		t.Errorf("storage served %v reads of a connection that reads no responses (its budget: %v)", served, budgetReads)
	}
}
