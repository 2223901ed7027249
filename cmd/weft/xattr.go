package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/health"
)

// The admin tools (setstripe, getstripe, df) talk to a mounted weft through
// virtual extended attributes that the FUSE client answers itself; they are
// not listed by listxattr and never stored.
const (
	xattrLayout = "user.weft.layout" // get: a file's layout or a directory's default; set: the same JSON
	xattrDF     = "user.weft.df"     // get: per-target usage
	xattrMeta   = "user.weft.meta"   // get: the metadata server's address
	xattrResync = "user.weft.resync" // set: repair a mirrored file's stale copies
)

// layoutJSON is the value of user.weft.layout. StripeCount -1 means "every
// target"; Targets is set for files and empty for directory defaults. Kind
// is "raid0" (or absent), "mirror" (Mirror copies of every stripe) or "ec"
// (ECData data and ECParity parity shards); a file's Targets then hold
// Width() targets per stripe, stripe after stripe, and Stale the indices
// into Targets of objects that missed writes.
type layoutJSON struct {
	Kind        string   `json:"kind,omitempty"`
	Mirror      int      `json:"mirror,omitempty"`
	ECData      int      `json:"ec_k,omitempty"`
	ECParity    int      `json:"ec_m,omitempty"`
	StripeSize  uint64   `json:"stripe_size"`
	StripeCount int32    `json:"stripe_count"`
	Targets     []uint32 `json:"targets"`
	Stale       []uint32 `json:"stale,omitempty"`
}

// width is the number of objects per stripe.
func (l layoutJSON) width() int {
	switch l.Kind {
	case "mirror":
		return max(l.Mirror, 1)
	case "ec":
		return max(l.ECData+l.ECParity, 1)
	}
	return 1
}

// kindString names the protection as setstripe's flags do.
func (l layoutJSON) kindString() string {
	switch l.Kind {
	case "mirror":
		return fmt.Sprintf("mirror %d", l.Mirror)
	case "ec":
		return fmt.Sprintf("ec %d+%d", l.ECData, l.ECParity)
	}
	return "raid0"
}

// targetJSON is one element of the user.weft.df array.
type targetJSON = health.Target

// errNotWeft is wrapped when a path does not answer weft's attributes.
var errNotWeft = errors.New("not on a weft file system")

// retryEINTR runs call again while it fails with EINTR. The Go runtime
// signals its own threads (SIGURG preempts goroutines); a signal that
// arrives while a thread waits in a FUSE request makes the kernel send the
// mount an interrupt, which ends the request with EINTR. The kernel does
// not restart such a call and x/sys/unix does not retry it, so a long
// request through the mount (a resync, a layout change) would fail now
// and then for no reason of its own. Every call made through here is
// idempotent.
func retryEINTR(call func() error) error {
	for {
		if err := call(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// setxattr is unix.Setxattr, retried on EINTR.
func setxattr(path, name string, v []byte) error {
	return retryEINTR(func() error { return unix.Setxattr(path, name, v, 0) })
}

// getxattrInto is unix.Getxattr, retried on EINTR.
func getxattrInto(path, name string, buf []byte) (n int, err error) {
	err = retryEINTR(func() error {
		n, err = unix.Getxattr(path, name, buf)
		return err
	})
	return n, err
}

// getxattr reads a whole extended attribute, growing the buffer if the value
// grows between the size query and the read.
func getxattr(path, name string) ([]byte, error) {
	size := 4096
	for range 8 {
		buf := make([]byte, size)
		n, err := getxattrInto(path, name, buf)
		if err == nil {
			return buf[:n], nil
		}
		if !errors.Is(err, unix.ERANGE) {
			return nil, err
		}
		if n, err = getxattrInto(path, name, nil); err != nil {
			return nil, err
		}
		size = n + 4096
	}
	return nil, fmt.Errorf("getxattr %s %s: value keeps growing", path, name)
}

// weftAttr reads one of weft's virtual attributes and explains the failure
// when path is not on weft.
func weftAttr(path, name string) ([]byte, error) {
	v, err := getxattr(path, name)
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
		return nil, fmt.Errorf("%s: %w (it has no %s attribute; is weft mounted there?)", path, errNotWeft, name)
	case errors.Is(err, unix.ENOTCONN):
		return nil, fmt.Errorf("%s: the weft mount is stale (its client is gone; run: fusermount3 -u MOUNTPOINT and mount again)", path)
	}
	return nil, fmt.Errorf("%s: read %s: %w", path, name, err)
}

func getLayout(path string) (layoutJSON, error) {
	v, err := weftAttr(path, xattrLayout)
	if err != nil {
		return layoutJSON{}, err
	}
	var l layoutJSON
	if err := json.Unmarshal(v, &l); err != nil {
		return layoutJSON{}, fmt.Errorf("%s: bad %s value %q: %w", path, xattrLayout, v, err)
	}
	return l, nil
}

func getDF(path string) ([]targetJSON, error) {
	v, err := weftAttr(path, xattrDF)
	if err != nil {
		return nil, err
	}
	var ts []targetJSON
	if err := json.Unmarshal(v, &ts); err != nil {
		return nil, fmt.Errorf("%s: bad %s value %q: %w", path, xattrDF, v, err)
	}
	return ts, nil
}

// findWeftMount returns the mountpoint of the first weft mount listed in a
// /proc/mounts-format table.
func findWeftMount(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		if f[2] == "fuse.weft" || (f[0] == "weft" && strings.HasPrefix(f[2], "fuse")) {
			return unescapeMountField(f[1]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no weft mount found in /proc/mounts (give a PATH on weft, or mount it: weft mount --meta HOST:PORT MOUNTPOINT)")
}

func defaultWeftMount() (string, error) {
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return findWeftMount(f)
}

// unescapeMountField undoes the octal escapes (\040 for space, ...) that
// the kernel uses in /proc/mounts.
func unescapeMountField(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
