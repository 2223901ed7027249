package meta

import (
	"github.com/weft-fs/weft/proto"
)

// Access bits, as in access(2): what a caller wants to do with an inode.
const (
	accessRead  uint32 = 4
	accessWrite uint32 = 2
	accessExec  uint32 = 1
)

// permitted reports whether c may access an inode with attributes a in
// every way want asks (a mask of access bits), by POSIX rules: the owner
// class if c owns it, else the group class if c is in its group, else
// other. Root may read and write anything, and execute anything that
// someone may execute (or any directory).
func permitted(c proto.Cred, a *proto.Attr, want uint32) bool {
	if c.Uid == 0 {
		if want&accessExec == 0 || a.IsDir() || a.Mode&0o111 != 0 {
			return true
		}
		return false
	}
	var bits uint32
	switch {
	case c.Uid == a.Uid:
		bits = a.Mode >> 6
	case c.InGroup(a.Gid):
		bits = a.Mode >> 3
	default:
		bits = a.Mode
	}
	return bits&7&want == want
}
