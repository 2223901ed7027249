package proto

// FindFilter selects what a find returns (like lfs find). Zero fields
// select everything; every field that is set must match.
type FindFilter struct {
	Name     string // a glob (path.Match) of the base name; "" any
	Type     byte   // 'f' regular file, 'd' directory, 'l' symbolic link; 0 any
	Size     Cmp    // bytes
	Mtime    Cmp    // unix nanoseconds
	Uid, Gid *uint32
	// StripeCount compares a regular file's stripe count (others never
	// match a set StripeCount or Target).
	StripeCount Cmp
	Target      *TargetID // a stripe of the file is on this target
	// MaxDepth bounds how deep below the start the walk goes (0: the start
	// itself only; negative: no bound).
	MaxDepth int32
}

// Cmp compares a number: Op '<' (below Value), '=' (equal), '>' (above),
// or 0 (no condition).
type Cmp struct {
	Op    byte
	Value int64
}

// Matches reports whether v satisfies c.
func (c Cmp) Matches(v int64) bool {
	switch c.Op {
	case '<':
		return v < c.Value
	case '=':
		return v == c.Value
	case '>':
		return v > c.Value
	}
	return true
}

// Found is one entry a find returned: its path below the start (the start
// itself is "."), and its attributes.
type Found struct {
	Path string
	Attr Attr
}
