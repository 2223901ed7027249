package meta

import (
	"strings"
	"syscall"

	"github.com/weft-fs/weft/proto"
)

// Permission checks of the metadata operations, the rules of Linux (ext4)
// as the VFS applies them. A nil cred is a trusted caller: every check
// passes. Checks that depend on state a concurrent command may change run
// at apply time against the command's Cred; read-only operations check at
// read time.

func isRoot(c *proto.Cred) bool { return c == nil || c.Uid == 0 }

// ownerOrRoot is inode_owner_or_capable.
func ownerOrRoot(c *proto.Cred, a *proto.Attr) bool { return isRoot(c) || c.Uid == a.Uid }

// may checks access bits want on a (EACCES).
func may(c *proto.Cred, a *proto.Attr, want uint32, what string) error {
	if c == nil || permitted(*c, a, want) {
		return nil
	}
	return errnof(syscall.EACCES, "uid %d may not %s inode %d (mode %#o)", c.Uid, what, a.Ino, a.Mode&0o7777)
}

// maySearch: lookup of a name needs exec (search) on the directory.
func maySearch(c *proto.Cred, dir *proto.Attr) error { return may(c, dir, accessExec, "search") }

// mayCreate: a new entry needs write and search on the directory.
func mayCreate(c *proto.Cred, dir *proto.Attr) error {
	return may(c, dir, accessWrite|accessExec, "add entries to")
}

// mayDelete: removing (or renaming away, or replacing) an entry needs write
// and search on the directory, and in a sticky directory only the owner of
// the entry's inode, the owner of the directory or root may (EPERM).
func mayDelete(c *proto.Cred, dir, victim *proto.Attr) error {
	if err := may(c, dir, accessWrite|accessExec, "remove entries from"); err != nil {
		return err
	}
	if c != nil && dir.Mode&syscall.S_ISVTX != 0 && c.Uid != 0 && c.Uid != dir.Uid && c.Uid != victim.Uid {
		return errnof(syscall.EPERM, "uid %d may not remove inode %d from sticky directory %d", c.Uid, victim.Ino, dir.Ino)
	}
	return nil
}

// killSuid clears setuid, and setgid if group-exec is set (a real setgid,
// not a locking mark), from a regular file written or truncated by a
// caller without root's privileges (Linux's file_remove_privs).
func killSuid(c *proto.Cred, a *proto.Attr) {
	if isRoot(c) || !a.IsRegular() {
		return
	}
	a.Mode &^= syscall.S_ISUID
	if a.Mode&(syscall.S_ISGID|syscall.S_IXGRP) == syscall.S_ISGID|syscall.S_IXGRP {
		a.Mode &^= syscall.S_ISGID
	}
}

// checkSetAttr checks a setattr against a's current attributes and returns
// the permission bits to store if SetMode is set (S_ISGID may be cleared).
// viaHandle says the caller's session holds an open handle on the inode
// (ftruncate, open with O_TRUNC). Errors as Linux's setattr_prepare:
// EPERM for ownership rules, EACCES for a missing write permission.
func checkSetAttr(c *proto.Cred, a *proto.Attr, in *proto.SetAttrIn, viaHandle bool) (mode uint32, err error) {
	mode = in.Mode & 0o7777
	if c == nil || c.Uid == 0 {
		return mode, nil
	}
	owner := c.Uid == a.Uid
	writable := permitted(*c, a, accessWrite)
	if in.Valid&proto.SetSize != 0 && !viaHandle && !writable {
		return 0, errnof(syscall.EACCES, "uid %d may not truncate inode %d", c.Uid, a.Ino)
	}
	if in.Valid&proto.SetUid != 0 && !(owner && in.Uid == a.Uid) {
		return 0, errnof(syscall.EPERM, "uid %d may not chown inode %d to uid %d", c.Uid, a.Ino, in.Uid)
	}
	if in.Valid&proto.SetGid != 0 && !(owner && (in.Gid == a.Gid || c.InGroup(in.Gid))) {
		return 0, errnof(syscall.EPERM, "uid %d may not chgrp inode %d to gid %d", c.Uid, a.Ino, in.Gid)
	}
	if in.Valid&proto.SetMode != 0 {
		old := a.Mode & 0o7777
		const priv = syscall.S_ISUID | syscall.S_ISGID
		switch {
		case owner:
			gid := a.Gid
			if in.Valid&proto.SetGid != 0 {
				gid = in.Gid
			}
			if !c.InGroup(gid) {
				mode &^= syscall.S_ISGID
			}
		case mode&^priv == old&^priv && mode&^old == 0 && (writable || viaHandle):
			// Only clearing setuid/setgid: what the kernel sends before a
			// write or truncate by a non-owner (file_remove_privs).
		default:
			return 0, errnof(syscall.EPERM, "uid %d may not chmod inode %d", c.Uid, a.Ino)
		}
	}
	explicit := in.Valid&(proto.SetAtime|proto.SetMtime|proto.SetCtime) != 0
	now := in.Valid & (proto.SetAtimeNow | proto.SetMtimeNow)
	switch {
	case explicit && !owner:
		return 0, errnof(syscall.EPERM, "uid %d may not set the times of inode %d", c.Uid, a.Ino)
	case now == 0 || owner || in.Valid&proto.SetSize != 0:
		// A truncate's own mtime update is part of the truncate.
	case now == proto.SetAtimeNow|proto.SetMtimeNow:
		if !writable {
			return 0, errnof(syscall.EACCES, "uid %d may not touch inode %d", c.Uid, a.Ino)
		}
	default:
		return 0, errnof(syscall.EPERM, "uid %d may not set the times of inode %d", c.Uid, a.Ino)
	}
	return mode, nil
}

// Extended attribute namespaces.
const (
	xattrUser     = "user."
	xattrTrusted  = "trusted."
	xattrSecurity = "security."
)

// mayWriteXattr checks setxattr and removexattr: trusted.* and security.*
// are root's (EPERM); user.* only on regular files and directories (EPERM),
// not by a non-owner on a sticky directory (EPERM), and needs write
// permission (EACCES).
func mayWriteXattr(c *proto.Cred, a *proto.Attr, name string) error {
	if isRoot(c) {
		return nil
	}
	switch {
	case strings.HasPrefix(name, xattrTrusted), strings.HasPrefix(name, xattrSecurity):
		return errnof(syscall.EPERM, "uid %d may not set %q", c.Uid, name)
	case strings.HasPrefix(name, xattrUser):
		if !a.IsRegular() && !a.IsDir() {
			return errnof(syscall.EPERM, "user xattrs only on files and directories")
		}
		if a.IsDir() && a.Mode&syscall.S_ISVTX != 0 && c.Uid != a.Uid {
			return errnof(syscall.EPERM, "uid %d may not set xattrs of sticky directory %d", c.Uid, a.Ino)
		}
	}
	return may(c, a, accessWrite, "set xattrs of")
}

// mayReadXattr checks getxattr: trusted.* does not exist for non-root
// (ENODATA), user.* exists only on regular files and directories (ENODATA)
// and needs read permission (EACCES); security.* needs nothing.
func mayReadXattr(c *proto.Cred, a *proto.Attr, name string) error {
	if isRoot(c) {
		return nil
	}
	switch {
	case strings.HasPrefix(name, xattrTrusted):
		return errnof(syscall.ENODATA, "no xattr %q", name)
	case strings.HasPrefix(name, xattrSecurity):
		return nil
	case strings.HasPrefix(name, xattrUser):
		if !a.IsRegular() && !a.IsDir() {
			return errnof(syscall.ENODATA, "no xattr %q", name)
		}
	}
	return may(c, a, accessRead, "read xattrs of")
}

// listableXattr says whether listxattr shows name to c: trusted.* only to
// root. Listing needs no permission (as Linux).
func listableXattr(c *proto.Cred, name string) bool {
	return isRoot(c) || !strings.HasPrefix(name, xattrTrusted)
}

// creatorInGroup reports whether the creator of a new inode is in gid (or
// root): otherwise a setgid-exec file created in a setgid directory loses
// setgid (Linux's mode_strip_sgid).
func creatorInGroup(c *Command, gid uint32) bool {
	if c.Cred != nil {
		return c.Cred.Uid == 0 || c.Cred.InGroup(gid)
	}
	return c.Uid == 0 || c.Gid == gid
}

// mayRename checks a rename as Linux's vfs_rename: the source entry may be
// deleted from its directory, the destination entry created (or, if it
// exists, deleted) in its directory, and a directory that changes parent
// needs write permission on itself (its ".." changes).
func mayRename(c *proto.Cred, op, np, src, dst *inode, exchange, crossDir bool) error {
	if c == nil {
		return nil
	}
	if err := mayDelete(c, &op.Attr, &src.Attr); err != nil {
		return err
	}
	if dst == nil {
		if err := mayCreate(c, &np.Attr); err != nil {
			return err
		}
	} else if err := mayDelete(c, &np.Attr, &dst.Attr); err != nil {
		return err
	}
	if crossDir {
		if src.IsDir() {
			if err := may(c, &src.Attr, accessWrite, "move"); err != nil {
				return err
			}
		}
		if exchange && dst.IsDir() {
			if err := may(c, &dst.Attr, accessWrite, "move"); err != nil {
				return err
			}
		}
	}
	return nil
}
