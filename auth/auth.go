package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weft-fs/weft/transport"
)

// File names in a bundle (and in the CA directory).
const (
	CACertFile        = "ca.crt"
	CAKeyFile         = "ca.key"
	NodeCertFile      = "node.crt"
	NodeKeyFile       = "node.key"
	CapabilityKeyFile = "capability.key"
)

// validity is how long NewCA's and Issue's certificates are valid.
const validity = 10 * 365 * 24 * time.Hour

// CapabilityKeySize is the length of the capability HMAC key.
const CapabilityKeySize = 32

// rolePrefix marks the OrganizationalUnit value that carries a node's role.
const rolePrefix = "weft-role="

// keygenHint tells a user how to make what is missing.
const keygenHint = "make a cluster key set with `weft keygen --out DIR` or one more bundle with `weft keygen --ca DIR/ca --role ROLE --name NAME --out DIR2`"

// ErrBadRole is returned for a role that is not client, storage or meta.
var ErrBadRole = errors.New("auth: role must be client, storage or meta")

// ParseRole returns the transport role named s (client, storage, meta).
func ParseRole(s string) (transport.Role, error) {
	switch r := transport.Role(s); r {
	case transport.RoleClient, transport.RoleStorage, transport.RoleMeta:
		return r, nil
	}
	return transport.RoleNone, fmt.Errorf("%w, not %q", ErrBadRole, s)
}

// Keys is a loaded, checked bundle.
type Keys struct {
	dir     string
	role    transport.Role
	name    string
	ca      *x509.Certificate
	cert    *x509.Certificate
	certDER []byte
	key     ed25519.PrivateKey
	capKey  []byte
}

// Dir is the directory the bundle was loaded from.
func (k *Keys) Dir() string { return k.dir }

// Role is the role of the bundle's node certificate.
func (k *Keys) Role() transport.Role { return k.role }

// Name is the name in the bundle's node certificate.
func (k *Keys) Name() string { return k.name }

// CapabilityKey is the HMAC key of data capabilities: CapabilityKeySize
// bytes for meta and storage bundles, nil for client bundles.
func (k *Keys) CapabilityKey() []byte { return k.capKey }

// Load reads and checks the bundle in dir (see the package documentation).
func Load(dir string) (*Keys, error) { return load(dir, time.Now()) }

// load is Load as of now (tests load bundles that have since expired).
func load(dir string, now time.Time) (*Keys, error) {
	k := &Keys{dir: dir}
	var err error
	if k.ca, _, err = readCert(dir, CACertFile); err != nil {
		return nil, err
	}
	if k.cert, k.certDER, err = readCert(dir, NodeCertFile); err != nil {
		return nil, err
	}
	if k.key, err = readKey(dir, NodeKeyFile); err != nil {
		return nil, err
	}
	if pub, ok := k.cert.PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(k.key.Public()) {
		return nil, fmt.Errorf("auth: %s does not match %s (the two files come from different bundles)",
			filepath.Join(dir, NodeKeyFile), filepath.Join(dir, NodeCertFile))
	}
	if err := verify(k.ca, k.cert, now); err != nil {
		return nil, fmt.Errorf("auth: %s: %w", filepath.Join(dir, NodeCertFile), err)
	}
	if k.role, k.name, err = identity(k.cert); err != nil {
		return nil, fmt.Errorf("auth: %s: %w", filepath.Join(dir, NodeCertFile), err)
	}
	if k.role.IsServer() {
		if k.capKey, err = readCapabilityKey(dir); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// verify checks that cert is signed by ca and valid at now.
func verify(ca, cert *x509.Certificate, now time.Time) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := cert.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fmt.Errorf("not a valid certificate of this bundle's cluster CA: %w", err)
	}
	return nil
}

// identity reads the role and name a node certificate carries.
func identity(cert *x509.Certificate) (transport.Role, string, error) {
	var roles []string
	for _, ou := range cert.Subject.OrganizationalUnit {
		if r, ok := strings.CutPrefix(ou, rolePrefix); ok {
			roles = append(roles, r)
		}
	}
	if len(roles) != 1 {
		return transport.RoleNone, "", fmt.Errorf("auth: certificate of %q carries %d roles, want 1", cert.Subject.CommonName, len(roles))
	}
	r, err := ParseRole(roles[0])
	if err != nil {
		return transport.RoleNone, "", err
	}
	return r, cert.Subject.CommonName, nil
}

func missing(path string) error {
	return fmt.Errorf("auth: %s is missing: %s", path, keygenHint)
}

// readPrivate reads a private key file, refusing it if group or others
// may access it.
func readPrivate(dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, missing(path)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("auth: %s has mode %#o: a private key must be readable by its owner only: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return b, nil
}

func readPEM(path string, b []byte, typ string) ([]byte, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != typ {
		return nil, fmt.Errorf("auth: %s: not a PEM %q block", path, typ)
	}
	return blk.Bytes, nil
}

func readCert(dir, name string) (*x509.Certificate, []byte, error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, missing(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	der, err := readPEM(path, b, "CERTIFICATE")
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %s: %w", path, err)
	}
	return c, der, nil
}

func readKey(dir, name string) (ed25519.PrivateKey, error) {
	b, err := readPrivate(dir, name)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	der, err := readPEM(path, b, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("auth: %s: not an ed25519 key", path)
	}
	return ek, nil
}

func readCapabilityKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, CapabilityKeyFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("auth: %s is missing: a meta or storage bundle needs the cluster's capability key (copy it, mode 0600, from the CA directory or another server bundle, or issue the bundle with weft keygen)", path)
	}
	b, err := readPrivate(dir, CapabilityKeyFile)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(string(bytes.TrimSpace(b)))
	if err != nil || len(key) != CapabilityKeySize {
		return nil, fmt.Errorf("auth: %s: want %d hex digits (a %d-byte key)", path, 2*CapabilityKeySize, CapabilityKeySize)
	}
	return key, nil
}

// writeNew writes a new file with perm, refusing to overwrite one.
func writeNew(path string, b []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("auth: %s exists; refusing to overwrite keys (remove it first if you mean to replace it)", path)
	}
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// refuseExisting fails if any of names exists in dir, so that a generator
// writes all of its files or none.
func refuseExisting(dir string, names ...string) error {
	for _, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("auth: %s exists; refusing to overwrite keys (remove it first if you mean to replace it)", p)
		}
	}
	return nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(k ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// newKeyPair makes an ed25519 key pair and a random serial number for the
// certificate of its public key.
func newKeyPair() (ed25519.PublicKey, ed25519.PrivateKey, *big.Int, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("auth: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("auth: %w", err)
	}
	return pub, priv, sn, nil
}

// signAndEncode signs tmpl (for pub, by parent's key signer) and returns
// the certificate's DER and the PEM of priv.
func signAndEncode(tmpl, parent *x509.Certificate, pub ed25519.PublicKey, signer, priv ed25519.PrivateKey) (der, keyPEMBytes []byte, err error) {
	der, err = x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	kp, err := keyPEM(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	return der, kp, nil
}

// NewCA makes a cluster CA in dir (created if needed): ca.key, ca.crt and
// the cluster's capability.key.
func NewCA(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := refuseExisting(dir, CAKeyFile, CACertFile, CapabilityKeyFile); err != nil {
		return err
	}
	pub, priv, sn, err := newKeyPair()
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "weft cluster CA", Organization: []string{"weft"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, kp, err := signAndEncode(tmpl, tmpl, pub, priv, priv)
	if err != nil {
		return err
	}
	capKey := make([]byte, CapabilityKeySize)
	if _, err := rand.Read(capKey); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := writeNew(filepath.Join(dir, CAKeyFile), kp, 0o600); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, CapabilityKeyFile), []byte(hex.EncodeToString(capKey)+"\n"), 0o600); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, CACertFile), certPEM(der), 0o644)
}

// Issue makes a bundle for a node with role and name in outDir (created
// if needed), signed by the CA in caDir, and copies ca.crt and, for meta
// and storage, capability.key into it.
func Issue(caDir string, role transport.Role, name, outDir string) error {
	return issue(caDir, role, name, outDir, time.Now(), validity)
}

func issue(caDir string, role transport.Role, name, outDir string, notBefore time.Time, valid time.Duration) error {
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	if name == "" {
		return errors.New("auth: a node needs a name (e.g. its host name)")
	}
	ca, caDER, err := readCert(caDir, CACertFile)
	if err != nil {
		return err
	}
	caKey, err := readKey(caDir, CAKeyFile)
	if err != nil {
		return err
	}
	var capKey []byte
	if role.IsServer() {
		if capKey, err = readCapabilityKey(caDir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := refuseExisting(outDir, CACertFile, NodeCertFile, NodeKeyFile, CapabilityKeyFile, CAKeyFile); err != nil {
		return err
	}
	pub, priv, sn, err := newKeyPair()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject: pkix.Name{
			CommonName:         name,
			Organization:       []string{"weft"},
			OrganizationalUnit: []string{rolePrefix + string(role)},
		},
		NotBefore:   notBefore.Add(-time.Hour),
		NotAfter:    notBefore.Add(valid),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, kp, err := signAndEncode(tmpl, ca, pub, caKey, priv)
	if err != nil {
		return err
	}
	if err := writeNew(filepath.Join(outDir, NodeKeyFile), kp, 0o600); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(outDir, NodeCertFile), certPEM(der), 0o644); err != nil {
		return err
	}
	if capKey != nil {
		if err := writeNew(filepath.Join(outDir, CapabilityKeyFile), []byte(hex.EncodeToString(capKey)+"\n"), 0o600); err != nil {
			return err
		}
	}
	return writeNew(filepath.Join(outDir, CACertFile), certPEM(caDER), 0o644)
}

// Cluster bundle directories GenerateCluster makes under its dir.
const (
	ClusterCADir      = "ca"
	ClusterMetaDir    = "meta"
	ClusterStorageDir = "storage"
	ClusterClientDir  = "client"
)

// GenerateCluster makes a cluster key set under dir: the CA in dir/ca and
// one bundle per role in dir/meta, dir/storage and dir/client (named after
// the role). Every meta server can use dir/meta, every storage server
// dir/storage and every client dir/client; issue per-host bundles with
// Issue where names should tell hosts apart.
func GenerateCluster(dir string) error {
	if err := NewCA(filepath.Join(dir, ClusterCADir)); err != nil {
		return err
	}
	ca := filepath.Join(dir, ClusterCADir)
	for _, r := range []transport.Role{transport.RoleMeta, transport.RoleStorage, transport.RoleClient} {
		if err := Issue(ca, r, string(r), filepath.Join(dir, string(r))); err != nil {
			return err
		}
	}
	return nil
}
