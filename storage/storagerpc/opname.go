package storagerpc

// OpName returns the name monitoring shows for a storage op code, or "" if
// op is not one.
func OpName(op uint16) string {
	switch op {
	case OpRead, OpJobRead, OpReadSums, OpJobReadSums:
		return "read"
	case OpWrite, OpJobWrite:
		return "write"
	case OpTruncate:
		return "truncate"
	case OpSync:
		return "sync"
	case OpSpace:
		return "space"
	case OpSeek:
		return "seek"
	case OpAllocated:
		return "allocated"
	case OpCopy:
		return "copy"
	case OpRemove:
		return "remove"
	case OpRemoveMany:
		return "remove_many"
	case OpExtend:
		return "extend"
	case OpJob:
		return "job"
	case OpJobStats:
		return "jobstats"
	case OpRebuild:
		return "rebuild"
	case OpCopyRow:
		return "copy_row"
	case OpScrubStart:
		return "scrub_start"
	case OpLocalInfo:
		return "local_info"
	}
	return rowOpName(op)
}
