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
)

// Counter names.
const (
	CounterNextIno    = "next_ino"
	CounterInodes     = "inodes"
	CounterNextTarget = "next_target"
	CounterFormat     = "format"
	// CounterApplied is the log index of the last command whose changes
	// are stored, written in the same batch as those changes.
	CounterApplied = "applied_index"
)

// CounterKey is "c" + name.
func CounterKey(name string) []byte { return append([]byte{PrefixCounter}, name...) }

func u64key(prefix byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefix}, v)
}

// InodeKey is "i" + ino.
func InodeKey(ino uint64) []byte { return u64key(PrefixInode, ino) }

// DirPrefix is "d" + parent: the prefix of every entry of one directory.
func DirPrefix(parent uint64) []byte { return u64key(PrefixDirent, parent) }

// DirentKey is "d" + parent + name.
func DirentKey(parent uint64, name string) []byte { return append(DirPrefix(parent), name...) }

// XattrPrefix is "x" + ino.
func XattrPrefix(ino uint64) []byte { return u64key(PrefixXattr, ino) }

// XattrKey is "x" + ino + name.
func XattrKey(ino uint64, name string) []byte { return append(XattrPrefix(ino), name...) }

// OrphanKey is "o" + ino.
func OrphanKey(ino uint64) []byte { return u64key(PrefixOrphan, ino) }

// GCKey is "g" + target + ino + stripe: one object to remove.
func GCKey(target uint32, ino uint64, stripe uint32) []byte {
	k := binary.BigEndian.AppendUint32([]byte{PrefixGC}, target)
	k = binary.BigEndian.AppendUint64(k, ino)
	return binary.BigEndian.AppendUint32(k, stripe)
}

// ParseGCKey splits a GC key; ok is false for a malformed key.
func ParseGCKey(k []byte) (target uint32, ino uint64, stripe uint32, ok bool) {
	if len(k) != 17 || k[0] != PrefixGC {
		return 0, 0, 0, false
	}
	return binary.BigEndian.Uint32(k[1:]), binary.BigEndian.Uint64(k[5:]), binary.BigEndian.Uint32(k[13:]), true
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
