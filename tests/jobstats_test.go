package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// jobLine is one line of `weft jobstats --json`.
type jobLine struct {
	Job        string            `json:"job"`
	Service    string            `json:"service"`
	Server     string            `json:"server"`
	Ops        map[string]uint64 `json:"ops"`
	ReadBytes  uint64            `json:"read_bytes"`
	WriteBytes uint64            `json:"write_bytes"`
	Requests   uint64            `json:"requests"`
}

// jobTotals sums a job's lines of one service (storage: over servers).
type jobTotals struct {
	ops               map[string]uint64
	read, write, reqs uint64
}

func weftJobstats(t *testing.T, c *testcluster.Cluster, args ...string) map[string]map[string]*jobTotals {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Bin(), append([]string{"jobstats", "--json", "--meta", c.MetaAddr(), "--keys", c.Keys("client")}, args...)...).Output()
	if err != nil {
		t.Fatalf("weft jobstats: %v\n%s", err, stderrOf(err))
	}
	var lines []jobLine
	if err := json.Unmarshal(out, &lines); err != nil {
		t.Fatalf("weft jobstats --json printed %q: %v", out, err)
	}
	byJob := map[string]map[string]*jobTotals{}
	for _, l := range lines {
		if byJob[l.Job] == nil {
			byJob[l.Job] = map[string]*jobTotals{}
		}
		tot := byJob[l.Job][l.Service]
		if tot == nil {
			tot = &jobTotals{ops: map[string]uint64{}}
			byJob[l.Job][l.Service] = tot
		}
		for k, v := range l.Ops {
			tot.ops[k] += v
		}
		tot.read += l.ReadBytes
		tot.write += l.WriteBytes
		tot.reqs += l.Requests
	}
	return byJob
}

// runAs runs a shell script in dir as a process whose environment sets
// SLURM_JOB_ID to job ("": unset): what a batch job's processes look like
// to the mount.
func runAs(t *testing.T, job, dir, script string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_JOB_ID=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if job != "" {
		cmd.Env = append(cmd.Env, "SLURM_JOB_ID="+job)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("job %q: %v: %s", job, err, out)
	}
	return nil
}

// TestJobStats: two jobs run concurrently on one mount, a third on another
// mount, a fourth reads the first's files from the second mount, and a
// process with no job works alongside. `weft jobstats` attributes every
// job its exact creates and bytes written, the reader its bytes read, and
// counts nothing for the process without a job; the Prometheus metrics
// of the metadata and storage servers say the same.
func TestJobStats(t *testing.T) {
	metaMetrics, storageMetrics := freeAddr(t), freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, Mounts: 2,
		MetaArgs: []string{"--metrics", metaMetrics}, StorageArgs: []string{"--metrics", storageMetrics}})
	c.WaitTargetsUp(2)
	m0, m1 := c.Mount(0), c.Mount(1)
	for _, d := range []string{"a", "b", "c", "none"} {
		if err := os.Mkdir(filepath.Join(m0, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// job: files created, bytes each.
	jobs := []struct {
		job, mnt, dir string
		files, size   int
	}{
		{"1001", m0, "a", 40, 5000},
		{"1002", m0, "b", 25, 70000},
		{"1003", m1, "c", 15, 3 << 20},
		{"", m0, "none", 10, 100},
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		wg.Go(func() {
			script := fmt.Sprintf(`for i in $(seq 1 %d); do head -c %d /dev/zero > f$i; done`, j.files, j.size)
			errs <- runAs(t, j.job, filepath.Join(j.mnt, j.dir), script)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Job 1004 reads job 1002's files through the other mount (whose
	// page cache has none of them).
	if err := runAs(t, "1004", filepath.Join(m1, "b"), `cat f* > /dev/null`); err != nil {
		t.Fatal(err)
	}

	st := weftJobstats(t, c)
	if len(st) != 4 {
		t.Fatalf("jobs %v, want 1001..1004 only", keys(st))
	}
	for _, j := range jobs[:3] {
		m, s := st[j.job]["meta"], st[j.job]["storage"]
		if m == nil || s == nil {
			t.Fatalf("job %s: meta %v storage %v", j.job, m, s)
		}
		if m.ops["create_open"] != uint64(j.files) {
			t.Errorf("job %s: %d creates counted, %d made (ops %v)", j.job, m.ops["create_open"], j.files, m.ops)
		}
		if want := uint64(j.files * j.size); s.write != want || s.read != 0 {
			t.Errorf("job %s: %d bytes written and %d read counted, %d written", j.job, s.write, s.read, want)
		}
	}
	r := st["1004"]
	if r["storage"] == nil || r["storage"].write != 0 || r["storage"].read < uint64(jobs[1].files*jobs[1].size) || r["meta"].ops["create_open"] != 0 {
		t.Errorf("reader job 1004: %+v %+v, want at least %d bytes read", r["storage"], r["meta"], jobs[1].files*jobs[1].size)
	}

	// --job shows one job only.
	if one := weftJobstats(t, c, "--job", "1003"); len(one) != 1 || one["1003"] == nil {
		t.Errorf("--job 1003 gave %v", keys(one))
	}
	// The same counts in Prometheus, labelled by job.
	fams := scrape(t, metaMetrics)
	if v := value(fams, "weft_job_requests_total", "create_open", "job", "1001", "service", "meta"); v != 40 {
		t.Errorf("meta metrics: job 1001 create_open = %v", v)
	}
	fams = scrape(t, storageMetrics)
	if v := value(fams, "weft_job_bytes_total", "", "job", "1003", "dir", "write"); v != float64(15*(3<<20)) {
		t.Errorf("storage metrics: job 1003 bytes written = %v", v)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestExecWithFilesOpen: a process that execs while it holds files of the
// mount open closes them during execve, which sends a FLUSH for each from
// a process that holds its exec lock until the FLUSH is answered. The
// mount must answer without reading that process's /proc/PID/environ (for
// its job id), which would wait for the same lock: before, every such
// exec hung for ever (TestTargetDrain's `weft find` did, while a reader
// had a file open).
func TestExecWithFilesOpen(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Targets: 1})
	var files []*os.File
	for i := range 4 {
		f, err := os.Create(filepath.Join(c.Mount(0), fmt.Sprintf("f%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f) // Go opens with O_CLOEXEC
	}
	for i := range 20 {
		err := within(t, fmt.Sprintf("exec %d of a process with %d files of the mount open", i, len(files)), func() error {
			cmd := exec.Command("true")
			cmd.Env = append(os.Environ(), fmt.Sprintf("SLURM_JOB_ID=%d", 500+i))
			return cmd.Run()
		})
		if err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
	}
	for _, f := range files {
		if _, err := f.WriteString("still open"); err != nil {
			t.Fatalf("write after the execs: %v", err)
		}
	}
}
