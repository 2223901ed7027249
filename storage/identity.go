package storage

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

const identityFile = "target.json"

// identity is what target.json holds. FSID is the file system the target
// was formatted for: learned from the metadata server at the first
// registration (targets made before file system ids adopt it then), and
// checked against it at every start after.
type identity struct {
	UUID string         `json:"uuid"`
	ID   proto.TargetID `json:"id"`
	FSID string         `json:"fsid,omitempty"`
}

// lockFile is held (flock) by the process serving the target.
const lockFile = "target.lock"

// ErrForeignFS is returned when a target belongs to another file system
// than the metadata server it is told to register with.
var ErrForeignFS = errors.New("storage: target belongs to another file system")

func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// loadIdentity reads dir/target.json, creating it with a fresh uuid and id 0
// on the first start.
func loadIdentity(fs vfs.FS, dir string) (identity, error) {
	name := filepath.Join(dir, identityFile)
	f, err := fs.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		u, err := newUUID()
		if err != nil {
			return identity{}, fmt.Errorf("storage: target %s: uuid: %w", dir, err)
		}
		id := identity{UUID: u}
		return id, storeIdentity(fs, dir, id)
	}
	if err != nil {
		return identity{}, fmt.Errorf("storage: target %s: %w", dir, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil {
		return identity{}, fmt.Errorf("storage: target %s: %w", dir, err)
	}
	var id identity
	if err := json.Unmarshal(b, &id); err != nil || id.UUID == "" {
		return identity{}, fmt.Errorf("storage: target %s: bad %s: %v", dir, identityFile, err)
	}
	return id, nil
}

// storeIdentity replaces target.json atomically.
func storeIdentity(fs vfs.FS, dir string, id identity) error {
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	if err := replaceFile(fs, dir, identityFile, append(b, '\n')); err != nil {
		return fmt.Errorf("storage: target %s: store identity: %w", dir, err)
	}
	return nil
}

// replaceFile replaces dir/name with b atomically: write a temporary file,
// fsync it, rename it over, fsync the directory.
func replaceFile(fs vfs.FS, dir, name string, b []byte) error {
	path := filepath.Join(dir, name)
	tmp := path + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(fs, dir)
	}
	return err
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
