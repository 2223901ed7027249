package capability

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"

	"github.com/weft-fs/weft/proto"
)

const (
	// Version is the format this package writes and reads. Version 2
	// added the file's generation; version 1 capabilities (never released,
	// and expired within their lifetime) are refused with ErrVersion.
	Version = 2
	// KeySize is the length of the shared key.
	KeySize = 32
	// MaxHolder bounds the holder's name.
	MaxHolder = 255
	// Skew is how far past its expiry a capability is still accepted, for
	// the clock difference between the metadata server that set the expiry
	// and the storage server that checks it.
	Skew = 30 * time.Second

	headerSize = 36
	macSize    = sha256.Size
)

// Errors of Parse and Verify, and of Capability.Allows. Storage servers
// answer all of them with EACCES and log which one it was.
var (
	ErrMissing      = errors.New("capability: none attached")
	ErrMalformed    = errors.New("capability: malformed")
	ErrVersion      = errors.New("capability: unknown version")
	ErrKey          = errors.New("capability: signed with an unknown key")
	ErrBadSignature = errors.New("capability: bad signature")
	ErrExpired      = errors.New("capability: expired")
	ErrWrongInode   = errors.New("capability: for another inode")
	ErrWrongGen     = errors.New("capability: for another generation of the inode")
	ErrRights       = errors.New("capability: does not grant the access")
	ErrHolder       = errors.New("capability: issued to another client")
)

// Capability is the content of a signed capability.
type Capability struct {
	KeyID  uint8
	Ino    proto.Ino
	Gen    uint64 // the file's generation (proto.Attr.Gen)
	Rights proto.Access
	Issued time.Time // by the issuer's clock
	Expiry time.Time // by the issuer's clock
	Holder string    // certificate name of the client; "" = any
}

// Lifetime is how long the capability is valid, by the issuer's clock.
func (c Capability) Lifetime() time.Duration { return c.Expiry.Sub(c.Issued) }

// Allows checks that c grants want on the objects of generation gen of
// inode ino to a peer named peer (the certificate name of the requesting
// client). The generation matters once an inode number is reused (after
// a metadata rollback): a capability for the new file must not reach the
// old file's objects, nor the reverse.
func (c Capability) Allows(ino proto.Ino, gen uint64, want proto.Access, peer string) error {
	switch {
	case c.Ino != ino:
		return fmt.Errorf("%w: issued for inode %d, used for %d", ErrWrongInode, c.Ino, ino)
	case c.Gen != gen:
		return fmt.Errorf("%w: issued for inode %d generation %#x, used for generation %#x", ErrWrongGen, ino, c.Gen, gen)
	case !c.Rights.Has(want):
		return fmt.Errorf("%w: grants %v, needs %v", ErrRights, c.Rights, want)
	case c.Holder != "" && c.Holder != peer:
		return fmt.Errorf("%w: issued to %q, used by %q", ErrHolder, c.Holder, peer)
	}
	return nil
}

// Key signs and verifies capabilities with one shared key. It is safe for
// concurrent use.
type Key struct {
	id     uint8
	hashes sync.Pool // of hash.Hash: HMAC states keyed with the key, reused
}

// NewKey returns a Key for secret, which must be KeySize bytes. id is the
// key id written into capabilities it signs (0 until key rotation).
func NewKey(id uint8, secret []byte) (*Key, error) {
	if len(secret) != KeySize {
		return nil, fmt.Errorf("capability: key of %d bytes, want %d", len(secret), KeySize)
	}
	s := append([]byte(nil), secret...)
	k := &Key{id: id}
	k.hashes.New = func() any { return hmac.New(sha256.New, s) }
	return k, nil
}

func (k *Key) mac(dst, msg []byte) []byte {
	h := k.hashes.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	dst = h.Sum(dst)
	k.hashes.Put(h)
	return dst
}

// Sign encodes c, signed. c.KeyID is ignored: the key's id is written.
func (k *Key) Sign(c Capability) ([]byte, error) {
	if len(c.Holder) > MaxHolder {
		return nil, fmt.Errorf("capability: holder name of %d bytes (max %d)", len(c.Holder), MaxHolder)
	}
	if c.Rights&^proto.AccessReadWrite != 0 {
		return nil, fmt.Errorf("capability: unknown rights %#x", uint8(c.Rights))
	}
	b := make([]byte, headerSize, headerSize+len(c.Holder)+macSize)
	b[0] = Version
	b[1] = k.id
	b[2] = uint8(c.Rights)
	b[3] = uint8(len(c.Holder))
	binary.LittleEndian.PutUint64(b[4:], uint64(c.Ino))
	binary.LittleEndian.PutUint64(b[12:], uint64(c.Issued.UnixNano()))
	binary.LittleEndian.PutUint64(b[20:], uint64(c.Expiry.UnixNano()))
	binary.LittleEndian.PutUint64(b[28:], c.Gen)
	b = append(b, c.Holder...)
	return k.mac(b, b), nil
}

// Parse decodes b without checking its signature: for clients, which do not
// hold the key, to learn a capability's lifetime. Servers use Verify.
func Parse(b []byte) (Capability, error) {
	if len(b) == 0 {
		return Capability{}, ErrMissing
	}
	if b[0] != Version {
		return Capability{}, fmt.Errorf("%w %d", ErrVersion, b[0])
	}
	if len(b) < headerSize+macSize {
		return Capability{}, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	n := int(b[3])
	if len(b) != headerSize+n+macSize {
		return Capability{}, fmt.Errorf("%w: %d bytes for a holder of %d", ErrMalformed, len(b), n)
	}
	r := proto.Access(b[2])
	if r&^proto.AccessReadWrite != 0 {
		return Capability{}, fmt.Errorf("%w: unknown rights %#x", ErrMalformed, b[2])
	}
	return Capability{
		KeyID:  b[1],
		Rights: r,
		Ino:    proto.Ino(binary.LittleEndian.Uint64(b[4:])),
		Issued: time.Unix(0, int64(binary.LittleEndian.Uint64(b[12:]))),
		Expiry: time.Unix(0, int64(binary.LittleEndian.Uint64(b[20:]))),
		Gen:    binary.LittleEndian.Uint64(b[28:]),
		Holder: string(b[headerSize : headerSize+n]),
	}, nil
}

// Verify checks b's signature and expiry (with Skew) at now, and returns
// its content. Check what it grants with Capability.Allows.
func (k *Key) Verify(b []byte, now time.Time) (Capability, error) {
	c, err := Parse(b)
	if err != nil {
		return Capability{}, err
	}
	if c.KeyID != k.id {
		return Capability{}, fmt.Errorf("%w %d", ErrKey, c.KeyID)
	}
	var sum [macSize]byte
	body := len(b) - macSize
	if !hmac.Equal(k.mac(sum[:0], b[:body]), b[body:]) {
		return Capability{}, ErrBadSignature
	}
	if now.After(c.Expiry.Add(Skew)) {
		return Capability{}, fmt.Errorf("%w at %v (%v ago)", ErrExpired, c.Expiry.UTC(), now.Sub(c.Expiry).Round(time.Millisecond))
	}
	return c, nil
}
