package wrapper

import (
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil/fakecgroup"
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
	// The first cell is the harness's (connect's sync). Which limit holds
	// instead is this host's (TestSlurmLimitNoteTellsTheLimitThatHolds):
	// the job's, another cgroup's, or none, each with what sets one.
	if s := strings.Join(h.firstStderr, "\n"); !strings.Contains(s, "the memory limit of 300 MiB is not applied inside Slurm job 12: ") ||
		!strings.Contains(s, "applies to th") || !strings.Contains(s, "ConstrainRAMSpace=yes") && !strings.Contains(s, "sbatch --mem") {
		t.Fatalf("the first cell's stderr: %q; want to be told the memory limit is not applied inside the job, which limit holds instead, and what sets one", s)
	}
	h.drainIOPub()
	h.execute("again", nil)
	if name, text := h.nextStream(20 * time.Second); name != "stdout" || text != "again" {
		t.Fatalf("the second cell got %s %q: told twice?", name, text)
	}
}

// The first cell of a kernel given --memory-limit inside a Slurm job is
// told the limit that holds it (#36 item 2): the job's own, with its
// figure; a cgroup's above a job that has none of its own; or, where the
// job has no memory cgroup (proctrack/linuxproc with task/none or
// task/affinity) or one without a limit (ConstrainRAMSpace=no), that no
// memory limit applies at all, and what gives one. Fake cgroup2 trees
// under t.TempDir, as cgroup's TestOuterMemory makes them.
func TestSlurmLimitNoteTellsTheLimitThatHolds(t *testing.T) {
	tree := func(limits map[string]string, self string) *cgroup.OuterMemory {
		return cgroup.NewOuterMemory(fakecgroup.MemoryV2(t, limits, self))
	}
	const job = "system.slice/slurmstepd.scope/job_14"
	const daemon = "system.slice/slurmd.service"
	noLimit := []string{"no memory limit applies to this kernel", "task/cgroup and ConstrainRAMSpace=yes", "ask the cluster's admin"}
	for _, tc := range []struct {
		name   string
		outer  *cgroup.OuterMemory
		want   []string
		unwant string
	}{
		{"the job's limit (task/cgroup, --mem=400M)",
			tree(map[string]string{job: "419430400", job + "/step_batch": "max"}, job+"/step_batch/user/task_0"),
			[]string{"the job's own memory limit (400 MiB) applies to the kernel", "sbatch --mem"}, "no memory limit applies"},
		{"a job cgroup without a limit (ConstrainRAMSpace=no)",
			tree(map[string]string{job: "max", job + "/step_batch": "max"}, job+"/step_batch"), noLimit, "own memory limit"},
		{"no job cgroup (proctrack/linuxproc, task/affinity)",
			tree(map[string]string{daemon: "max"}, daemon), noLimit, "own memory limit"},
		{"no memory controller", nil, noLimit, "own memory limit"},
		{"slurmd's limit, not the job's",
			tree(map[string]string{daemon: "1073741824"}, daemon),
			[]string{"the job has no memory limit of its own", "the memory limit of 1 GiB of cgroup", daemon + ", which holds the job"}, "no memory limit applies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := engine.Engine{Kind: engine.Slurm, SlurmJob: "14"}.SlurmLimit(tc.outer.Of())
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("told %q; want %q in it", got, w)
				}
			}
			if strings.Contains(got, tc.unwant) {
				t.Errorf("told %q; it must not say %q", got, tc.unwant)
			}
		})
	}
}

// The first cell of a kernel given --memory-limit inside a container whose
// cgroups it cannot write is told the limit that holds it instead (#36):
// the container's, with its figure (rootful podman --memory 1g); for a
// rootless container on cgroup v1, which has no cgroup of its own and
// whose engine ignores --memory, that no memory limit applies and that
// none of the engine's options can set one (the host admin's matter), or
// the host cgroup's limit that holds it; never advice to use --memory
// where it is ignored. The limits are read from fake cgroup2 trees under
// t.TempDir (as TestSlurmLimitNoteTellsTheLimitThatHolds); whether the
// memory controller is v1 is the layout's.
func TestContainerLimitNoteTellsTheLimitThatHolds(t *testing.T) {
	tree := func(limit string) *cgroup.OuterMemory {
		const self = "libpod_parent/libpod-0123"
		return cgroup.NewOuterMemory(fakecgroup.MemoryV2(t, map[string]string{self: limit}, self))
	}
	v1 := cgroup.Layout{Kind: cgroup.LayoutV1, V1: map[string]string{"memory": "/sys/fs/cgroup/memory", "freezer": "/sys/fs/cgroup/freezer"}}
	hybrid := cgroup.Layout{Kind: cgroup.LayoutHybrid, V2Mount: "/sys/fs/cgroup/unified", V1: map[string]string{"memory": "/sys/fs/cgroup/memory"}}
	v2 := cgroup.Layout{Kind: cgroup.LayoutV2, V2Mount: "/sys/fs/cgroup"}
	rootful := engine.Engine{Kind: engine.Container, Runtime: "podman", Why: "/run/.containerenv"}
	rootless := engine.Engine{Kind: engine.Container, Runtime: "podman", Why: "/run/.containerenv", Rootless: true, HostUID: 1001}
	noLimit := []string{"no memory limit applies to this kernel", "none of podman's options can give it one", "ignores --memory",
		"only the host's admin can", "cgroup v2", "delegated", "uid 1001"}
	for _, tc := range []struct {
		name   string
		e      engine.Engine
		l      cgroup.Layout
		outer  *cgroup.OuterMemory
		want   []string
		unwant []string
	}{
		{"rootful, --memory 1g", rootful, v1, tree("1073741824"),
			[]string{"the container's memory limit of 1 GiB (cgroup ", "/libpod_parent/libpod-0123) holds the kernel"},
			[]string{"no memory limit applies", "rootless"}},
		{"rootful, no --memory", rootful, v1, tree("max"),
			[]string{"no memory limit applies to this kernel", "podman run --memory 8g gives it one"}, []string{"rootless", "admin"}},
		{"rootless on v1", rootless, v1, tree("max"), noLimit, []string{"run --memory 8g gives", "the container's memory limit"}},
		{"rootless on a hybrid host (memory in v1)", rootless, hybrid, tree("max"), noLimit, []string{"run --memory 8g gives"}},
		{"rootless on v1, no memory controller to read", rootless, v1, nil, noLimit, []string{"run --memory 8g gives"}},
		{"rootless on v1 in a host cgroup with a limit", rootless, v1, tree("2147483648"),
			[]string{"a rootless container on cgroup v1 has no memory limit of its own", "podman ignores --memory there",
				"the memory limit of 2 GiB of the host's cgroup", "applies to the kernel"},
			[]string{"no memory limit applies", "the container's memory limit"}},
		{"rootless on v2 with the memory controller delegated", rootless, v2, tree("1073741824"),
			[]string{"the container's memory limit of 1 GiB"}, []string{"no memory limit applies", "ignores"}},
		{"rootless on v2 without a limit", rootless, v2, tree("max"),
			[]string{"no memory limit applies to this kernel", "where the host delegates the cgroup v2 memory controller", "uid 1001"},
			[]string{"ignores"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := containerLimitHolds(tc.e, tc.l, tc.outer)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("told %q; want %q in it", got, w)
				}
			}
			for _, u := range tc.unwant {
				if strings.Contains(got, u) {
					t.Errorf("told %q; it must not say %q", got, u)
				}
			}
		})
	}
}
