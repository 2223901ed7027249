package store

import (
	"encoding/binary"
)

// Key prefixes. Each record kind has its own one-byte prefix so that a kind
// can be scanned alone; integers inside keys are big-endian so that byte
// order is numeric order. See doc.go for the whole schema.
const (
	PrefixCounter   = 'c'
	PrefixInode     = 'i'
	PrefixDirent    = 'd'
	PrefixXattr     = 'x'
	PrefixOrphan    = 'o'
	PrefixGC        = 'g'
	PrefixTargetID  = 't'
	PrefixTargetUID = 'u'
	PrefixReply     = 's' // remembered replies of client requests, per session
	PrefixQuota     = 'q' // one quota account: usage and limits of a user, group or project
	PrefixParam     = 'p' // run-time parameters set with --persist (meta/params.go)
	PrefixLost      = 'l' // objects the scrub found corrupt that nothing can repair (meta/scrub.go)
	PrefixCopy      = 'f' // a small file's bytes kept beside its objects (meta/copies.go)
)

// Counter names.
const (
	CounterNextIno    = "next_ino"
	CounterInodes     = "inodes"
	CounterNextTarget = "next_target"
	CounterFormat     = "format"
	// CounterApplied is the log index of the last batch the state machine
	// committed, written in that batch: on a single server every batch
	// raises it by one (so it counts batches, see Mark); on a replica it is
	// the raft index of the batch's entry.
	CounterApplied = "applied"
	// CounterFSID ("c fsid") holds the file system's uuid, made at format:
	// a string, not a counter.
	CounterFSID = "fsid"
	// CounterQuotas is 1 once quota usage counts every inode of the store:
	// set at format, or by the recount of a store formatted before quotas.
	CounterQuotas = "quotas"
)

// CounterKey is "c" + name.
func CounterKey(name string) []byte { return append([]byte{PrefixCounter}, name...) }

func u64key(prefix byte, v uint64) []byte { return u64NameKey(prefix, v, "") }

// u64NameKey is prefix + v + name, in one allocation of its size.
func u64NameKey(prefix byte, v uint64, name string) []byte {
	k := binary.BigEndian.AppendUint64(append(make([]byte, 0, 1+8+len(name)), prefix), v)
	return append(k, name...)
}

// InodeKey is "i" + ino.
func InodeKey(ino uint64) []byte { return u64key(PrefixInode, ino) }

// The Append forms below append a key to dst and return the result, so
// that a writer can build its keys in a buffer it reuses (Batch copies
// what it is given).

// AppendInodeKey appends InodeKey(ino) to dst.
func AppendInodeKey(dst []byte, ino uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, PrefixInode), ino)
}

// AppendDirentKey appends DirentKey(parent, name) to dst.
func AppendDirentKey(dst []byte, parent uint64, name string) []byte {
	return append(binary.BigEndian.AppendUint64(append(dst, PrefixDirent), parent), name...)
}

// DirPrefix is "d" + parent: the prefix of every entry of one directory.
func DirPrefix(parent uint64) []byte { return u64key(PrefixDirent, parent) }

// DirentKey is "d" + parent + name.
func DirentKey(parent uint64, name string) []byte { return u64NameKey(PrefixDirent, parent, name) }

// XattrPrefix is "x" + ino.
func XattrPrefix(ino uint64) []byte { return u64key(PrefixXattr, ino) }

// XattrKey is "x" + ino + name.
func XattrKey(ino uint64, name string) []byte { return u64NameKey(PrefixXattr, ino, name) }

// OrphanKey is "o" + ino.
func OrphanKey(ino uint64) []byte { return u64key(PrefixOrphan, ino) }

// GCKey is "g" + target + ino + stripe (+ gen, unless 0): one object to
// remove. Generation 0 keeps the key of before generations, so a queue
// written then is still drained.
func GCKey(target uint32, ino uint64, stripe uint32, gen uint64) []byte {
	return AppendGCKey(make([]byte, 0, 1+4+8+4+8), target, ino, stripe, gen)
}

// AppendGCKey appends GCKey(target, ino, stripe, gen) to dst.
func AppendGCKey(dst []byte, target uint32, ino uint64, stripe uint32, gen uint64) []byte {
	k := binary.BigEndian.AppendUint32(append(dst, PrefixGC), target)
	k = binary.BigEndian.AppendUint64(k, ino)
	k = binary.BigEndian.AppendUint32(k, stripe)
	if gen != 0 {
		k = binary.BigEndian.AppendUint64(k, gen)
	}
	return k
}

// ParseGCKey splits a GC key; ok is false for a malformed key.
func ParseGCKey(k []byte) (target uint32, ino uint64, stripe uint32, gen uint64, ok bool) {
	if (len(k) != 17 && len(k) != 25) || k[0] != PrefixGC {
		return 0, 0, 0, 0, false
	}
	if len(k) == 25 {
		gen = binary.BigEndian.Uint64(k[17:])
		if gen == 0 {
			return 0, 0, 0, 0, false
		}
	}
	return binary.BigEndian.Uint32(k[1:]), binary.BigEndian.Uint64(k[5:]), binary.BigEndian.Uint32(k[13:]), gen, true
}

// ReplyPrefix is "s" + session id (16 bytes) + u16 length of the client's
// certificate name + the name: the prefix of every remembered reply of one
// client session.
func ReplyPrefix(session [16]byte, name string) []byte {
	k := make([]byte, 0, 1+16+2+len(name)+8)
	k = append(k, PrefixReply)
	k = append(k, session[:]...)
	k = binary.BigEndian.AppendUint16(k, uint16(len(name)))
	return append(k, name...)
}

// ReplyKey is ReplyPrefix + slot: one of the session's reply slots.
func ReplyKey(prefix []byte, slot uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(prefix)+8), prefix...), slot)
}

// AppendReplyKey appends ReplyKey(ReplyPrefix(session, name), slot) to dst.
func AppendReplyKey(dst []byte, session [16]byte, name string, slot uint64) []byte {
	dst = append(append(dst, PrefixReply), session[:]...)
	dst = append(binary.BigEndian.AppendUint16(dst, uint16(len(name))), name...)
	return binary.BigEndian.AppendUint64(dst, slot)
}

// ParseReplyKey splits a reply key into its session prefix and slot; ok is
// false for a malformed key.
func ParseReplyKey(k []byte) (prefix []byte, slot uint64, ok bool) {
	if len(k) < 1+16+2+8 || k[0] != PrefixReply {
		return nil, 0, false
	}
	n := int(binary.BigEndian.Uint16(k[17:]))
	if len(k) != 1+16+2+n+8 {
		return nil, 0, false
	}
	return k[:len(k)-8], binary.BigEndian.Uint64(k[len(k)-8:]), true
}

// QuotaKey is "q" + kind + id: the account of one user (kind 1), group
// (2) or project (3).
func QuotaKey(kind uint8, id uint32) []byte { return AppendQuotaKey(nil, kind, id) }

// AppendQuotaKey appends QuotaKey(kind, id) to dst.
func AppendQuotaKey(dst []byte, kind uint8, id uint32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, PrefixQuota, kind), id)
}

// ParseQuotaKey splits a quota key; ok is false for a malformed key.
func ParseQuotaKey(k []byte) (kind uint8, id uint32, ok bool) {
	if len(k) != 6 || k[0] != PrefixQuota {
		return 0, 0, false
	}
	return k[1], binary.BigEndian.Uint32(k[2:]), true
}

// TargetIDKey is "t" + id.
func TargetIDKey(id uint32) []byte { return binary.BigEndian.AppendUint32([]byte{PrefixTargetID}, id) }

// TargetUUIDKey is "u" + uuid.
func TargetUUIDKey(uuid string) []byte { return append([]byte{PrefixTargetUID}, uuid...) }

// ParseU64Suffix reads the big-endian uint64 after a one-byte prefix (inode,
// orphan and xattr-prefix keys).
func ParseU64Suffix(k []byte) (uint64, bool) {
	if len(k) < 9 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:9]), true
}

// AppendCopyKey appends "f" + ino to dst: the copy of a small file's bytes
// (meta/copies.go).
func AppendCopyKey(dst []byte, ino uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, PrefixCopy), ino)
}

// ParamKey is "p" + the parameter's name; the value is its text.
func ParamKey(name string) []byte { return append([]byte{PrefixParam}, name...) }

// LostPrefix is "l" + ino: the lost objects of one inode, of any
// generation.
func LostPrefix(ino uint64) []byte { return u64key(PrefixLost, ino) }

// LostGenPrefix is "l" + ino + gen: the lost objects of one generation
// of an inode.
func LostGenPrefix(ino, gen uint64) []byte {
	return binary.BigEndian.AppendUint64(LostPrefix(ino), gen)
}

// LostKey is "l" + ino + gen + stripe + target: one object that the scrub
// found corrupt and nothing can repair.
func LostKey(ino, gen uint64, stripe, target uint32) []byte {
	k := binary.BigEndian.AppendUint32(LostGenPrefix(ino, gen), stripe)
	return binary.BigEndian.AppendUint32(k, target)
}

// ParseLostKey is LostKey's inverse; ok is false for a key of another
// shape.
func ParseLostKey(k []byte) (ino, gen uint64, stripe, target uint32, ok bool) {
	if len(k) != 1+8+8+4+4 || k[0] != PrefixLost {
		return 0, 0, 0, 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), binary.BigEndian.Uint64(k[9:]),
		binary.BigEndian.Uint32(k[17:]), binary.BigEndian.Uint32(k[21:]), true
}
