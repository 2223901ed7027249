package client

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

func TestEnvValue(t *testing.T) {
	env := []byte("A=1\x00SLURM_JOB_ID=4242\x00SLURM_JOB_ID_X=9\x00B=")
	for name, want := range map[string]string{"SLURM_JOB_ID": "4242", "A": "1", "B": "", "C": ""} {
		if got, _ := envValue(env, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestSanitizeJobID(t *testing.T) {
	for in, want := range map[string]string{
		"123":                   "123",
		"a b\tc":                "a_b_c",
		"\xff":                  "_",
		strings.Repeat("x", 99): strings.Repeat("x", proto.MaxJobID),
	} {
		got := sanitizeJobID(in, proto.MaxJobID)
		if got != want || proto.ValidJobID(got) != nil {
			t.Errorf("sanitize %q = %q (%v), want %q", in, got, proto.ValidJobID(got), want)
		}
	}
}

// A real process: its environment variable, and its name with uid.
func TestJobIDOfProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "SLURM_JOB_ID=777", "MY_JOB=a b")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	// The environment is read from /proc once the exec is done.
	deadline := time.Now().Add(time.Minute)
	for JobIDSource(DefaultJobIDVar).JobID(pid, 5) != "777" {
		if time.Now().After(deadline) {
			t.Fatalf("job id %q", JobIDSource(DefaultJobIDVar).JobID(pid, 5))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := JobIDSource("MY_JOB").JobID(pid, 5); got != "a_b" {
		t.Errorf("MY_JOB = %q", got)
	}
	if got := JobIDSource(JobIDProcnameUID).JobID(pid, 1000); got != "sleep.1000" {
		t.Errorf("procname_uid = %q", got)
	}
	if got := JobIDSource("").JobID(pid, 5); got != "" {
		t.Errorf("no source gave %q", got)
	}
	if got := JobIDSource("NOT_SET_ANYWHERE").JobID(pid, 5); got != "" {
		t.Errorf("unset variable gave %q", got)
	}
	if !JobIDSource("X").Valid() || JobIDSource("A=B").Valid() {
		t.Error("Valid")
	}
}
