package client

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/weft-fs/weft/proto"
)

// JobIDProcnameUID is the JobIDSource setting that names a job by the
// calling process's name and uid ("dd.1000"), as Lustre's
// jobid_var=procname_uid does.
const JobIDProcnameUID = "procname_uid"

// DefaultJobIDVar is the environment variable `weft mount` takes job ids
// from by default (Slurm's).
const DefaultJobIDVar = "SLURM_JOB_ID"

// JobIDSource says where the job id of a calling process comes from: ""
// (none), JobIDProcnameUID, or the name of an environment variable of the
// process (read from /proc/PID/environ: the environment it was started
// with, as Lustre reads it).
type JobIDSource string

// Valid reports whether s is a setting JobID understands.
func (s JobIDSource) Valid() bool {
	return s == "" || s == JobIDProcnameUID || (!strings.ContainsAny(string(s), "=\x00") && len(s) <= 256)
}

// JobID returns the job id of process pid running as uid ("" when the
// source is "", the process is gone, or its environment has no such
// variable). What it returns is always a valid job id
// (proto.ValidJobID): spaces and control characters become '_' and it is
// cut at proto.MaxJobID bytes.
func (s JobIDSource) JobID(pid, uid uint32) string {
	if s == "" || pid == 0 {
		return ""
	}
	dir := "/proc/" + strconv.FormatUint(uint64(pid), 10)
	if s == JobIDProcnameUID {
		comm, err := os.ReadFile(dir + "/comm")
		if err != nil {
			return ""
		}
		name := strings.TrimRight(string(comm), "\n")
		suffix := "." + strconv.FormatUint(uint64(uid), 10)
		return sanitizeJobID(name, proto.MaxJobID-len(suffix)) + suffix
	}
	env, err := os.ReadFile(dir + "/environ")
	if err != nil {
		return ""
	}
	v, _ := envValue(env, string(s))
	return sanitizeJobID(v, proto.MaxJobID)
}

// envValue finds name's value in a NUL-separated environment block.
func envValue(env []byte, name string) (string, bool) {
	prefix := []byte(name + "=")
	for len(env) > 0 {
		kv := env
		if i := bytes.IndexByte(env, 0); i >= 0 {
			kv, env = env[:i], env[i+1:]
		} else {
			env = nil
		}
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			return string(v), true
		}
	}
	return "", false
}

// sanitizeJobID makes v a valid job id of at most max bytes.
func sanitizeJobID(v string, max int) string {
	var b strings.Builder
	for _, r := range v {
		if r <= ' ' || r == 0x7f || r == utf8.RuneError {
			r = '_'
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// withJob returns ctx carrying job, or ctx itself for no job (background
// work of no job costs nothing).
func withJob(ctx context.Context, job string) context.Context {
	if job == "" {
		return ctx
	}
	return proto.WithJob(ctx, job)
}
