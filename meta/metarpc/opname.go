package metarpc

// opNames are the names monitoring shows for the op codes (snake_case, like
// Prometheus label values).
var opNames = map[uint16]string{
	OpLookup: "lookup", OpGetAttr: "getattr", OpSetAttr: "setattr", OpCreate: "create",
	OpMkdir: "mkdir", OpSymlink: "symlink", OpReadlink: "readlink", OpLink: "link",
	OpUnlink: "unlink", OpRmdir: "rmdir", OpRename: "rename", OpReadDir: "readdir",
	OpGetXattr: "getxattr", OpSetXattr: "setxattr", OpListXattr: "listxattr",
	OpRemoveXattr: "removexattr", OpOpen: "open", OpWriteDone: "write_done",
	OpRelease: "release", OpSetLayout: "set_layout", OpStatFS: "statfs",
	OpTargets: "targets", OpRegisterTarget: "register_target", OpCreateOpen: "create_open",
	OpUnlinkAt: "unlink_at", OpRmdirAt: "rmdir_at", OpReleaseMany: "release_many",
	OpCapability: "capability", OpSessionOpen: "session_open", OpSessionRenew: "session_renew",
	OpSessionClose: "session_close", OpStatus: "status", OpMemberStatus: "member_status", OpFind: "find",
	OpLock: "lock", OpLockWait: "lock_wait", OpAppend: "append", OpAppendReclaim: "append_reclaim",
	OpMembers: "members", OpMemberAdd: "member_add", OpMemberRemove: "member_remove",
	OpFSID: "fsid", OpMarkStale: "mark_stale", OpClearStale: "clear_stale",
	OpGroup: "group", OpSetQuota: "set_quota", OpGetQuota: "get_quota",
	OpSetProject: "set_project", OpCheckQuota: "check_quota",
	OpJobStats: "jobstats", OpParams: "params", OpParamSet: "param_set",
	OpTargetList: "target_list", OpTargetState: "target_state",
	OpRebuildRate: "rebuild_rate",
	OpScrubReport: "scrub_report", OpScrubStart: "scrub_start", OpScrubStatus: "scrub_status",
	OpMigrateBegin: "migrate_begin", OpMigrateCommit: "migrate_commit", OpMigrateAbort: "migrate_abort",
	OpMigrateFollow: "migrate_follow", OpMigrateRenew: "migrate_renew",
	OpLeasePoll:     "lease_poll",
	OpLeasePin:      "lease_pin",
	OpOpenCopy:      "open_copy",
	OpLookupCopy:    "lookup_copy",
	OpCopiesAfter:   "copies_after",
	OpWriteDoneCopy: "write_done_copy",
}

// OpName returns the name of a metadata op code, or "" if op is not one.
func OpName(op uint16) string { return opNames[op] }
