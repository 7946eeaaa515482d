package cgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// OuterMemory finds the smallest limit over the supervisor's cgroup and
// its ancestors up to the mount, and counts OOM kills where the kernel is
// charged (a fake cgroup2 tree under t.TempDir: a container's or a Slurm
// job's limit on an ancestor, none on the supervisor's own).
func TestOuterMemory(t *testing.T) {
	root := t.TempDir()
	job := filepath.Join(root, "slurm", "job_12")
	self := filepath.Join(job, "step_batch", "task_0")
	testutil.NoErr(t, os.MkdirAll(self, 0o755))
	write := func(dir, file, text string) {
		t.Helper()
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644))
	}
	write(root, "memory.max", "max\n") // not the root's: a delegated mount's top
	write(filepath.Dir(job), "memory.max", "max\n")
	write(job, "memory.max", "419430400\n")
	write(filepath.Dir(self), "memory.max", "1073741824\n")
	write(self, "memory.max", "max\n")
	write(self, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")

	o := NewOuterMemory(Layout{Kind: LayoutV2, V2Mount: root, V2Self: self})
	if o == nil || o.Limit != 400<<20 || o.Dir != job {
		t.Fatalf("NewOuterMemory = %+v; want 400 MiB at %s", o, job)
	}
	if o.Hit() {
		t.Fatal("Hit before any OOM kill since the baseline")
	}
	write(self, "memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n")
	if !o.Hit() {
		t.Fatal("no Hit after oom_kill went from 1 to 2")
	}
	o.Baseline()
	if o.Hit() {
		t.Fatal("Hit after a new baseline")
	}

	// No limit anywhere: an OOM kill is the host's, not an engine's limit.
	none := t.TempDir()
	write(none, "memory.max", "max\n")
	write(none, "memory.events", "oom_kill 0\n")
	o = NewOuterMemory(Layout{Kind: LayoutV2, V2Mount: none, V2Self: none})
	write(none, "memory.events", "oom_kill 5\n")
	if o == nil || o.Limit != 0 || o.Hit() {
		t.Fatalf("without a limit: %+v, Hit %v; want no limit and no hit", o, o.Hit())
	}
	// Without a memory controller there is nothing to name.
	if o := NewOuterMemory(Layout{Kind: LayoutV2, V2Mount: t.TempDir(), V2Self: t.TempDir()}); o != nil && o.Limit != 0 {
		t.Fatalf("without memory files: %+v", o)
	}
}
