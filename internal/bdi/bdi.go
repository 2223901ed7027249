package bdi

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysfsRoot is where the kernel lists backing devices; a variable so that
// tests can point it at a temporary directory.
var sysfsRoot = "/sys/class/bdi"

// Dir returns the sysfs directory of the bdi behind the file system mounted
// at mountpoint (named after the superblock's anonymous device number).
func Dir(mountpoint string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return "", fmt.Errorf("bdi: stat %s: %w", mountpoint, err)
	}
	name := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	dir := filepath.Join(sysfsRoot, name)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("bdi: no backing device %s for %s: %w", name, mountpoint, err)
	}
	return dir, nil
}

// ReadAhead returns the read-ahead window of the mount at mountpoint, in bytes.
func ReadAhead(mountpoint string) (int64, error) {
	dir, err := Dir(mountpoint)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "read_ahead_kb"))
	if err != nil {
		return 0, fmt.Errorf("bdi: %w", err)
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bdi: %s/read_ahead_kb: %w", dir, err)
	}
	return kb << 10, nil
}

// SetReadAhead sets the read-ahead window of the mount at mountpoint to
// bytes (rounded down to whole KiB, at least 4 KiB).
func SetReadAhead(mountpoint string, bytes int64) error {
	if bytes < 4<<10 {
		return fmt.Errorf("bdi: read-ahead %d bytes is below one page", bytes)
	}
	dir, err := Dir(mountpoint)
	if err != nil {
		return err
	}
	p := filepath.Join(dir, "read_ahead_kb")
	if err := os.WriteFile(p, []byte(strconv.FormatInt(bytes>>10, 10)), 0); err != nil {
		return fmt.Errorf("bdi: %w", err)
	}
	return nil
}
