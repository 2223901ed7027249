package localread

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

// TestDirectFD: an object's O_DIRECT descriptor is opened once, on first
// use, as a second open of the very file the server gave, and leaves the
// first descriptor's reads cached; where none can be had (here a socket,
// which cannot be opened through /proc; in use, a file this process may
// not open itself) the entry is marked as having none and its reads stay
// cached. Closing the entry closes every descriptor it has.
func TestDirectFD(t *testing.T) {
	r := New(nil, Options{})
	f, err := os.CreateTemp(t.TempDir(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	file, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	sock, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		data       int
		wantDirect bool
	}{{"file", file, true}, {"socket", sock, false}} {
		e := &entry{data: tc.data, crc: -1}
		fd := r.directFD(e)
		if got := fd >= 0; got != tc.wantDirect {
			t.Fatalf("%s: O_DIRECT descriptor %d, want one: %v", tc.name, fd, tc.wantDirect)
		}
		if _, tried := e.directFD(); !tried {
			t.Fatalf("%s: the entry does not remember the attempt", tc.name)
		}
		if again := r.directFD(e); again != fd {
			t.Fatalf("%s: second use gave descriptor %d, first %d", tc.name, again, fd)
		}
		if fd >= 0 {
			if flags := fcntlFlags(t, fd); flags&syscall.O_DIRECT == 0 {
				t.Fatalf("%s: descriptor flags %#x: no O_DIRECT", tc.name, flags)
			}
			if flags := fcntlFlags(t, tc.data); flags&syscall.O_DIRECT != 0 {
				t.Fatalf("%s: the cached descriptor became O_DIRECT too", tc.name)
			}
			if a, b := linkOf(t, fd), linkOf(t, tc.data); a != b {
				t.Fatalf("%s: direct descriptor names %s, the server's %s", tc.name, a, b)
			}
		}
		var closed []int
		c := newFDCache(0)
		c.close = func(fd int) error { closed = append(closed, fd); return syscall.Close(fd) }
		c.closeLocked(e)
		want := []int{tc.data, -1}
		if fd >= 0 {
			want = append(want, fd)
		}
		if len(closed) != len(want) || closed[0] != want[0] || closed[len(closed)-1] != want[len(want)-1] {
			t.Fatalf("%s: closed %v; want %v (data, sidecar, direct)", tc.name, closed, want)
		}
	}
}

func fcntlFlags(t *testing.T, fd int) int {
	t.Helper()
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	return int(r)
}

func linkOf(t *testing.T, fd int) string {
	t.Helper()
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
