//go:build linux

package doctor

import (
	"errors"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil/fakecgroup"
)

// Inside a container or on a host, doctor's containment and memory-limit
// findings give a fix whoever runs doctor there can make, or say plainly
// that it is the host admin's (#36): a rootless container on cgroup v1
// is told neither "run as root, delegate a cgroup v2 subtree, or log in
// through systemd-logind" nor to use podman --memory, which podman
// ignores there; a container with a memory limit has no memory problem.
// The limits are read from fake cgroup2 trees under t.TempDir; whether
// the controllers are v1 is the layout's.
func TestFindingsInsideContainersAreActionableThere(t *testing.T) {
	outer := func(limit string) *cgroup.OuterMemory {
		const self = "libpod_parent/libpod-0123"
		return cgroup.NewOuterMemory(fakecgroup.MemoryV2(t, map[string]string{self: limit}, self))
	}
	v1 := map[string]string{"memory": "/sys/fs/cgroup/memory", "freezer": "/sys/fs/cgroup/freezer"}
	readOnly := cgroup.Layout{Kind: cgroup.LayoutV1, V1: v1, ReadOnly: []string{"/sys/fs/cgroup/freezer", "/sys/fs/cgroup/memory"}}
	writable := cgroup.Layout{Kind: cgroup.LayoutV1, V1: v1}
	host := engine.Engine{}
	rootful := engine.Engine{Kind: engine.Container, Runtime: "podman", Why: "/run/.containerenv"}
	rootless := engine.Engine{Kind: engine.Container, Runtime: "podman", Why: "/run/.containerenv", Rootless: true, HostUID: 1001}
	roErr := errors.New("mkdir /sys/fs/cgroup/memory/tfgpu-doctor-7: read-only file system")
	permErr := errors.New("mkdir /sys/fs/cgroup/memory/tfgpu-doctor-7: permission denied")
	procDetail := "no usable cgroup v2 (cgroup layout is v1) or v1 freezer (permission denied)"
	hostOnly := []string{"run as root", "systemd-logind", "delegate a cgroup v2 subtree to this user"}

	for _, tc := range []struct {
		name        string
		e           engine.Engine
		l           cgroup.Layout
		outer       *cgroup.OuterMemory
		merr        error
		containment []string // in Text+Fix
		memory      []string
		unwant      []string // in neither
		problems    int
	}{
		{name: "rootless, read-only mounts (podman's default)", e: rootless, l: readOnly, outer: outer("max"), merr: roErr,
			containment: []string{"a rootless container on cgroup v1 cannot make cgroups", "the host admin's matter", "nothing to do inside it"},
			memory:      []string{"no memory limit applies to this kernel", "nor among podman's options", "ignores --memory", "the host admin's matter"},
			unwant:      append([]string{"--privileged", "give the container a memory limit"}, hostOnly...), problems: 1},
		{name: "rootless --privileged (read-write, still the host's)", e: rootless, l: writable, outer: outer("max"), merr: permErr,
			containment: []string{"a rootless container on cgroup v1 cannot make cgroups", "the host admin's matter"},
			memory:      []string{"no memory limit applies to this kernel", "the host admin's matter"},
			unwant:      append([]string{"--privileged", "give the container a memory limit"}, hostOnly...), problems: 1},
		{name: "rootful --memory 1g", e: rootful, l: readOnly, outer: outer("1073741824"), merr: roErr,
			containment: []string{"mounted read-only", "--privileged"},
			memory:      []string{"the container's memory limit of 1 GiB", "holds the kernel"},
			unwant:      append([]string{"rootless", "no memory limit applies"}, hostOnly...), problems: 1},
		{name: "rootful, no limit", e: rootful, l: readOnly, outer: outer("max"), merr: roErr,
			containment: []string{"mounted read-only"},
			memory:      []string{"no memory limit applies to this kernel", "podman/docker run --memory 8g"},
			unwant:      append([]string{"rootless", "admin"}, hostOnly...), problems: 2},
		{name: "rootful, a user inside without cgroup rights", e: rootful, l: writable, outer: outer("max"), merr: permErr,
			containment: []string{"the container's root", "--privileged"},
			memory:      []string{"podman/docker run --memory 8g"},
			unwant:      hostOnly, problems: 2},
		{name: "host, an unprivileged user", e: host, l: writable, merr: permErr,
			containment: hostOnly, memory: []string{"delegate the memory controller"}, unwant: []string{"container"}, problems: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := containmentFinding(tc.e, tc.l, cgroup.ModeProc, procDetail, nil)
			m := memoryFinding(tc.e, tc.l, tc.outer, "", tc.merr)
			problems := 0
			for _, f := range []struct {
				f    Finding
				want []string
			}{{c, tc.containment}, {m, tc.memory}} {
				all := f.f.Text + " / fix: " + f.f.Fix
				for _, w := range f.want {
					if !strings.Contains(all, w) {
						t.Errorf("%s: %q; want %q in it", f.f.Topic, all, w)
					}
				}
				for _, u := range tc.unwant {
					if strings.Contains(all, u) {
						t.Errorf("%s: %q; it must not say %q", f.f.Topic, all, u)
					}
				}
				if f.f.Problem {
					problems++
					if f.f.Fix == "" {
						t.Errorf("%s: a problem without a fix: %q", f.f.Topic, f.f.Text)
					}
				}
			}
			if problems != tc.problems {
				t.Errorf("%d problem(s); want %d:\n  %+v\n  %+v", problems, tc.problems, c, m)
			}
		})
	}
}

// Inside a Slurm job doctor tells the limit the first cell tells
// (engine.SlurmLimit): the job's own with its figure; a cgroup's above
// the job's; or none at all, with sbatch --mem the user's and its
// enforcement the cluster admin's. Nothing there is a problem with a fix
// to run inside the job.
func TestFindingsInsideASlurmJob(t *testing.T) {
	outer := func(limits map[string]string, self string) *cgroup.OuterMemory {
		return cgroup.NewOuterMemory(fakecgroup.MemoryV2(t, limits, self))
	}
	job := engine.Engine{Kind: engine.Slurm, SlurmJob: "12", SlurmStep: "batch"}
	const jobDir = "system.slice/slurmstepd.scope/job_12"
	for _, tc := range []struct {
		name   string
		outer  *cgroup.OuterMemory
		want   []string
		unwant string
	}{
		{"the job's --mem", outer(map[string]string{jobDir: "1073741824", jobDir + "/step_batch": "max"}, jobDir+"/step_batch"),
			[]string{"the job's own memory limit (1 GiB) applies to the kernel", "sbatch --mem"}, "no memory limit applies"},
		{"slurmd's limit, none of the job's", outer(map[string]string{"system.slice": "2147483648", jobDir: "max"}, jobDir),
			[]string{"no memory limit of its own", "2 GiB", "system.slice, which holds the job"}, "no memory limit applies"},
		{"no limit at all", outer(map[string]string{jobDir: "max"}, jobDir),
			[]string{"no memory limit applies to this kernel", "ConstrainRAMSpace=yes", "the cluster's admin"}, "own memory limit"},
		{"no memory controller", nil, []string{"no memory limit applies to this kernel"}, "own memory limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := slurmFindings(job, tc.outer)
			var all []string
			for _, f := range fs {
				if f.Problem || f.Fix != "" {
					t.Errorf("%s: a problem inside a job (fix %q): %s", f.Topic, f.Fix, f.Text)
				}
				all = append(all, f.Text)
			}
			text := strings.Join(all, "\n")
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("doctor said:\n%s\nwant %q in it", text, w)
				}
			}
			if strings.Contains(text, tc.unwant) {
				t.Errorf("doctor said:\n%s\nit must not say %q", text, tc.unwant)
			}
		})
	}
}
