package wrapper

import (
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
)

// Inside a Slurm job (#24) the kernel stays in the job's cgroups whatever
// --cgroup says (proc), no memory cgroup of ours is made under the job's,
// the first cell is told the --memory-limit is not applied and why, and
// the record names the job for ps. The engine is given (Config.engine);
// internal/engine's TestDetect covers how it is found, the Slurm E2E
// test (e2e_slurm_test.go) the real thing.
func TestInsideSlurmTheKernelStaysInTheJob(t *testing.T) {
	h := startHarnessWith(t, func(c *Config) {
		c.engine = &engine.Engine{Kind: engine.Slurm, SlurmJob: "12", SlurmStep: "batch", Why: "test"}
		c.Cgroup = cgroup.ModeV1
		c.MemoryLimit = 300 << 20
	})
	st := h.kernelState()
	if st.Containment != cgroup.ModeProc || st.Cgroup != "" || st.MemoryCgroup != "" {
		t.Fatalf("inside a Slurm job the record says containment %q, cgroup %q, memory cgroup %q; want proc and none of ours",
			st.Containment, st.Cgroup, st.MemoryCgroup)
	}
	if st.Slurm == nil || st.Slurm.Job != "12" || st.Slurm.Step != "batch" {
		t.Fatalf("the record's Slurm job: %+v", st.Slurm)
	}
	log := h.stderr.String()
	for _, want := range []string{"running inside Slurm job 12 (step batch)", "--cgroup v1 is not used inside a Slurm job",
		"mode=proc", "memory limit not applied"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	// The first cell is the harness's (connect's sync).
	if s := strings.Join(h.firstStderr, "\n"); !strings.Contains(s, "the memory limit of 300 MiB is not applied inside Slurm job 12") ||
		!strings.Contains(s, "sbatch --mem") {
		t.Fatalf("the first cell's stderr: %q; want to be told the memory limit is not applied inside the job, and what sets one", s)
	}
	h.drainIOPub()
	h.execute("again", nil)
	if name, text := h.nextStream(20 * time.Second); name != "stdout" || text != "again" {
		t.Fatalf("the second cell got %s %q: told twice?", name, text)
	}
}
