package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// Finding is one line of `tfgpu-kernel doctor`: what was checked, what was
// found, and, for a problem, the command that fixes it.
type Finding struct {
	Topic, Text string
	Problem     bool
	Fix         string
}

// Host checks what the supervisor would find on this host for
// containment, memory limits and kernels left by dead supervisors. It
// creates and removes probe cgroups; it changes nothing else. kernels
// lists the kernels to judge: the records in stateDir and the caller's
// running supervisors, and with allUsers (root) every user's
// (record.Collect). Without allUsers a kernel cgroup of another user is
// not judged: that user's kernels are not in the list, so a live one
// would look stale (#23).
func Host(stateDir string, allUsers bool, kernels func() ([]record.State, []error, error)) []Finding {
	var out []Finding
	add := func(f Finding) { out = append(out, f) }
	l, err := cgroup.DetectLayout()
	if err != nil {
		add(Finding{Topic: "cgroups", Text: err.Error(), Problem: true})
	} else {
		add(Finding{Topic: "cgroups", Text: describeLayout(l)})
	}

	eng := engine.Detect()
	var outer *cgroup.OuterMemory
	if err == nil {
		outer = cgroup.NewOuterMemory(l)
	}
	if f, ok := engineFinding(eng, l, outer); ok {
		add(f)
	}
	if eng.Kind == engine.Slurm {
		// The supervisor takes proc inside a job and applies no memory
		// limit of its own (docs/design.md#engines): nothing to probe.
		out = append(out, slurmFindings(eng, outer)...)
		return append(out, kernelFindings(l, stateDir, allUsers, kernels)...)
	}

	probe := fmt.Sprintf("doctor-%d", os.Getpid())
	opened, err := cgroup.Open(cgroup.Auto, probe, cgroup.Options{})
	mode, detail := "", ""
	if err == nil {
		mode, detail = opened.Tree.Mode(), opened.Detail
		opened.Tree.Close()
	}
	add(containmentFinding(eng, l, mode, detail, err))

	if err == nil {
		m, how, merr := cgroup.NewMemoryLimit(l, probe, 64<<20)
		if merr == nil {
			m.Close()
		}
		add(memoryFinding(eng, l, outer, how, merr))
	}

	return append(out, kernelFindings(l, stateDir, allUsers, kernels)...)
}

// containmentFinding is what auto picks (mode and detail: cgroup.Open's),
// or why it cannot (err), with a fix whoever reads it can make where they
// are: inside a container the fix is the container's (how it is run), and
// where nobody inside can make one (a rootless container on cgroup v1) it
// says that it is the host admin's.
func containmentFinding(eng engine.Engine, l cgroup.Layout, mode, detail string, err error) Finding {
	const topic = "containment"
	v1 := l.V1["memory"] != "" || l.V1["freezer"] != ""
	switch {
	case err != nil:
		return Finding{Topic: topic, Text: err.Error(), Problem: true}
	case mode != cgroup.ModeProc:
		return Finding{Topic: topic, Text: "auto picks " + mode + ": " + detail}
	case eng.Kind == engine.Container && eng.Rootless && v1:
		// Nothing to fix for clean restarts (proc kills the whole tree),
		// and nothing anyone inside can change: --privileged mounts the
		// cgroups read-write, but they are still the host's and not the
		// user's (EACCES).
		return Finding{Topic: topic, Text: "auto picks proc (process group and /proc), which kills the whole tree too: " +
			"a rootless container on cgroup v1 cannot make cgroups (" + detail + "); " +
			"cgroup containment here is the host admin's matter (cgroup v2, with a subtree delegated to the user who runs the container), nothing to do inside it"}
	case len(l.ReadOnly) > 0:
		return Finding{Topic: topic, Text: fmt.Sprintf("auto picks proc (process group and /proc): %s is mounted read-only (a container's default); proc kills the whole tree too",
			strings.Join(l.ReadOnly, ", ")), Problem: true,
			Fix: "nothing is needed for clean restarts; for cgroup containment run the container with writable cgroups (podman/docker --privileged, or podman --security-opt unmask=/sys/fs/cgroup)"}
	case eng.Kind == engine.Container:
		return Finding{Topic: topic, Text: "auto picks proc (process group and /proc): " + detail, Problem: true,
			Fix: "nothing is needed for clean restarts; for cgroup containment run the kernel as the container's root, in a container with writable cgroups (podman/docker --privileged)"}
	}
	return Finding{Topic: topic, Text: "auto picks proc (process group and /proc): " + detail, Problem: true,
		Fix: "run as root, delegate a cgroup v2 subtree to this user, or log in through systemd-logind so that a user manager (systemd --user) runs"}
}

// slurmFindings are containment and the memory limit inside Slurm job
// eng, whose cgroups outer reads: nothing there is a problem the user
// fixes from inside the job but asking for memory (sbatch --mem); whether
// Slurm enforces it is the cluster admin's, and the text (the first
// cell's, engine.SlurmLimit) says so.
func slurmFindings(eng engine.Engine, outer *cgroup.OuterMemory) []Finding {
	return []Finding{
		{Topic: "containment", Text: "proc inside a Slurm job: the kernel stays in the job's cgroups, where Slurm's proctrack, kill and memory limit reach it"},
		{Topic: "memory limit", Text: "--memory-limit is not applied inside a Slurm job: " + eng.SlurmLimit(outer.Of())},
	}
}

// memoryFinding is whether --memory-limit can be applied (how, or merr
// why not) and, where it cannot inside a container, which limit holds
// instead (engine.ContainerLimit): the container's is no problem; none
// at all is, with the fix of whoever can make one, the host admin's for
// a rootless container on cgroup v1, where the engine ignores --memory.
func memoryFinding(eng engine.Engine, l cgroup.Layout, outer *cgroup.OuterMemory, how string, merr error) Finding {
	const topic = "memory limit"
	if merr == nil {
		return Finding{Topic: topic, Text: "can be applied: " + how}
	}
	if eng.Kind != engine.Container {
		return Finding{Topic: topic, Text: "cannot be applied: " + merr.Error(), Problem: true,
			Fix: "kernels run without --memory-limit here; run as root or delegate the memory controller"}
	}
	limit, dir := outer.Of()
	memoryV1 := l.V1["memory"] != ""
	text := "--memory-limit cannot be applied (" + merr.Error() + "); "
	switch {
	case limit > 0:
		return Finding{Topic: topic, Text: text + eng.ContainerLimit(limit, dir, memoryV1) + "; a cell killed at it is told so"}
	case eng.Rootless && memoryV1:
		// The engine finding says why at length (ContainerLimit).
		engineName := eng.Runtime
		if engineName == "" {
			engineName = "the engine"
		}
		return Finding{Topic: topic, Text: text + "no memory limit applies to this kernel", Problem: true,
			Fix: fmt.Sprintf("none inside the container, nor among %s's options (it ignores --memory for a rootless container on cgroup v1): "+
				"it is the host admin's matter (cgroup v2, with the memory controller delegated to the user who runs the container)", engineName)}
	case eng.Rootless:
		return Finding{Topic: topic, Text: text + eng.ContainerLimit(limit, dir, memoryV1), Problem: true,
			Fix: "give the container a memory limit (podman run --memory 8g) where the host's admin delegates the cgroup v2 memory controller to you; the cell is told when it is hit"}
	}
	return Finding{Topic: topic, Text: text + eng.ContainerLimit(limit, dir, memoryV1), Problem: true,
		Fix: "give the container a memory limit (podman/docker run --memory 8g, a pod's resources.limits.memory); the cell is told when it is hit"}
}

// kernelFindings are the findings about the kernels: records refused,
// stale ones (with what happened to them where known), stale cgroups.
func kernelFindings(l cgroup.Layout, stateDir string, allUsers bool, kernels func() ([]record.State, []error, error)) []Finding {
	var out []Finding
	add := func(f Finding) { out = append(out, f) }
	states, refusals, err := kernels()
	for _, r := range refusals {
		add(Finding{Topic: "kernel record", Text: r.Error(), Problem: true,
			Fix: "nothing was done with it; remove the file once you know where it came from"})
	}
	if err != nil {
		fix := "remove it and let the next kernel make it, or choose another with TFGPU_STATE_DIR"
		add(Finding{Topic: "kernels", Text: err.Error(), Problem: true, Fix: fix})
	}
	live := 0
	census := record.Census(states, nil)
	known := liveCgroups(census)
	for _, k := range census {
		st := k.State
		if len(k.Pids(record.RoleSupervisor)) > 0 {
			live++
			continue
		}
		text := fmt.Sprintf("%s (supervisor %d is gone; %s)", st.KernelID, st.SupervisorPID, orDash(record.Printable(st.Cgroup)))
		if why := st.DeadWhy(); why != "" {
			text = fmt.Sprintf("%s (%s; supervisor %d; %s)", st.KernelID, why, st.SupervisorPID, orDash(record.Printable(st.Cgroup)))
		}
		if frozen := st.Frozen(); frozen != "" {
			text += "; " + frozen
		}
		add(Finding{Topic: "stale kernel", Problem: true, Fix: "tfgpu-kernel stop " + st.KernelID, Text: text})
	}
	where := "state in " + stateDir
	if allUsers {
		where += "; every user's, from the running supervisors"
	}
	add(Finding{Topic: "kernels", Text: fmt.Sprintf("%d supervised kernel(s) running, %s", live, where)})
	others := 0
	for _, dir := range kernelCgroups(l) {
		switch {
		case known[dir] || dir == "":
		case !allUsers && !ownCgroup(dir, os.Geteuid()):
			others++
		case supervisorLives(dir):
		default:
			add(staleCgroup(dir, census))
		}
	}
	if others > 0 {
		why := "not yours to judge; root's doctor checks them"
		if os.Geteuid() == 0 { // with a state directory named: this user's kernels only
			why = "not judged with one state directory; doctor without --state-dir or TFGPU_STATE_DIR checks them"
		}
		add(Finding{Topic: "kernels", Text: fmt.Sprintf("%d kernel cgroup(s) of other users: %s", others, why)})
	}
	return out
}

// ownCgroup reports whether the kernel cgroup dir is uid's to judge: the
// directory is uid's and so is every process in it. Another user's (a
// live kernel of theirs, whose supervisor uid's doctor cannot list) is
// not. A cgroup.procs that cannot be read leaves it to the directory's
// owner.
func ownCgroup(dir string, uid int) bool {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil || int(st.Uid) != uid {
		return false
	}
	pids, _ := cgroup.Procs(dir)
	for _, pid := range pids {
		if owner := proc.Owner(pid); owner >= 0 && owner != uid {
			return false
		}
	}
	return true
}

// liveCgroups are the cgroups of the live kernels of census: each
// kernel's tree and memory cgroups, and its standby's, whoever made them.
func liveCgroups(census []record.Kernel) map[string]bool {
	known := map[string]bool{}
	for _, k := range census {
		if k.Launched() == 0 && len(k.Pids(record.RoleStandby)) == 0 {
			continue // a dead supervisor's kernel: its cgroup is for stop to finish
		}
		for _, d := range []string{k.State.Cgroup, k.State.MemoryCgroup} {
			known[d] = d != ""
		}
		if sp := k.Spare; sp != nil {
			for _, d := range []string{sp.Cgroup, sp.MemoryCgroup} {
				known[d] = d != ""
			}
		}
	}
	return known
}

// supervisorLives reports whether the kernel cgroup dir was made by a
// supervisor (or standby) that still runs: supervisors name their cgroups
// tfgpu-ID-PID (wrapper's cgroupName) and PID is then a live tfgpu-kernel
// process of the cgroup's owner. A standby makes its cgroup before it
// records its spare; a supervisor, before it records its kernel.
func supervisorLives(dir string) bool {
	name := strings.TrimSuffix(filepath.Base(dir), ".scope")
	i := strings.LastIndexByte(name, '-')
	pid, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil || pid <= 1 {
		return false
	}
	var st unix.Stat_t
	p, perr := proc.Read(pid)
	return perr == nil && p.Alive() && p.Comm == "tfgpu-kernel" && unix.Lstat(dir, &st) == nil &&
		proc.Owner(pid) == int(st.Uid)
}

// staleCgroup is a kernel cgroup that no live supervisor records, nor
// made. `stop` works from records, so the fix is by hand: `stop --all`
// would stop the user's live kernels and leave this one. A process in it
// that belongs to a live kernel (census) is never advised to be killed.
func staleCgroup(dir string, census []record.Kernel) Finding {
	f := Finding{Topic: "stale cgroup", Text: dir + " (no supervisor records it)", Problem: true, Fix: "rmdir " + dir}
	pids, err := cgroup.Procs(dir)
	if err != nil || len(pids) == 0 {
		return f
	}
	for _, p := range pids {
		for _, k := range census {
			if role := k.RoleOf(p); role != "" {
				f.Problem = false
				f.Topic = "kernel cgroup"
				f.Text = fmt.Sprintf("%s holds process %d, the %s of kernel %s, whose records do not name the cgroup", dir, p, role, k.State.KernelID)
				f.Fix = ""
				return f
			}
		}
	}
	f.Text = fmt.Sprintf("%s (no supervisor records it; %d process(es) in it)", dir, len(pids))
	f.Fix = "kill the processes " + filepath.Join(dir, "cgroup.procs") + " lists, then rmdir " + dir
	return f
}

// GPU reports what the supervisor will find through NVML: the
// driver, the GPUs and their persistence mode. No driver is not a problem
// (the kernels work; release is not checked); persistence mode off is,
// where it can be turned on.
func GPU(nvmlLibrary string) []Finding {
	n := gpu.Connect(nvmlLibrary, "")
	defer n.Close()
	if err := n.Err(); err != nil {
		return []Finding{{Topic: "NVML", Text: err.Error() + "; kernels run as usual, GPU release is not checked"}}
	}
	driver, notes := n.About()
	out := []Finding{{Topic: "NVML", Text: fmt.Sprintf("driver %s, %d GPU(s)", driver, len(n.Devices()))}}
	for _, note := range notes {
		out = append(out, Finding{Topic: "NVML", Text: note})
	}
	for _, d := range n.Devices() {
		f := Finding{Topic: fmt.Sprintf("GPU%d", d.Index)}
		desc := fmt.Sprintf("%s, %s, %s", d.Name, gpu.FormatBytes(int64(d.Total)), d.UUID)
		on, err := n.Persistence(d)
		switch {
		case err != nil:
			f.Text = desc + "; persistence mode unknown: " + err.Error()
		case on:
			f.Text = desc + ", persistence mode on"
		default:
			f.Problem = true
			f.Text = desc + ", persistence mode off: the driver tears the GPU down whenever no process uses it, " +
				"so every restart pays its initialisation again (seconds) in NVML and in the new kernel's first CUDA call"
			f.Fix = "nvidia-smi -i " + fmt.Sprint(d.Index) + " -pm 1 (as root), or run nvidia-persistenced"
		}
		out = append(out, f)
	}
	return out
}

// Handoffs reports GPU checks that supervisors left unfinished in
// stateDir (a shutdown that ran into Jupyter's SIGTERM while the driver
// still held memory): still held is a problem; released is tidied away.
func Handoffs(stateDir, nvmlLibrary string) []Finding {
	d, err := record.OpenDir(stateDir, false, true)
	if err != nil {
		return nil // Host reports an unusable state directory
	}
	defer d.Close()
	handoffs := d.Handoffs()
	if len(handoffs) == 0 {
		return nil
	}
	n := gpu.Connect(nvmlLibrary, "")
	defer n.Close()
	if err := n.Err(); err != nil {
		return []Finding{{Topic: "GPU check", Problem: true,
			Text: fmt.Sprintf("%d unfinished check(s) in %s cannot be done: %v", len(handoffs), stateDir, err)}}
	}
	hs, err := n.Holders()
	if err != nil {
		return []Finding{{Topic: "GPU check", Problem: true, Text: err.Error()}}
	}
	var out []Finding
	for _, h := range handoffs {
		held := h.Old.Ours(hs)
		if len(held) == 0 {
			d.DropHandoff(h.KernelID) // released since: nothing left to check
			continue
		}
		out = append(out, Finding{Topic: "GPU check", Problem: true,
			Text: fmt.Sprintf("kernel %s's last tree is dead but the driver still holds: %s", h.KernelID, gpu.Result{Held: held}.HeldText()),
			Fix:  "nvidia-smi shows when the driver lets go; if it never does, reset the GPU once nothing else uses it: nvidia-smi -r -i N"})
	}
	return out
}

func describeLayout(l cgroup.Layout) string {
	var v1 []string
	for c := range l.V1 {
		v1 = append(v1, c)
	}
	sort.Strings(v1)
	s := l.Kind
	if l.V2Mount != "" {
		s += ", cgroup2 at " + l.V2Mount
	}
	if len(v1) > 0 {
		s += ", v1: " + strings.Join(v1, " ")
	}
	return s
}

// kernelCgroups lists tfgpu-* cgroups under the supervisor's own, in the
// v2 tree and the v1 freezer hierarchy.
func kernelCgroups(l cgroup.Layout) []string {
	var parents []string
	if l.V2Self != "" {
		parents = append(parents, l.V2Self)
	}
	if d, err := cgroup.V1SelfDir(l, "freezer"); err == nil {
		parents = append(parents, d)
	}
	var out []string
	for _, p := range parents {
		m, _ := filepath.Glob(filepath.Join(p, "tfgpu-*"))
		for _, d := range m {
			if !strings.Contains(filepath.Base(d), "-doctor-") && !strings.Contains(filepath.Base(d), "-probe-") {
				out = append(out, d)
			}
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "no cgroup"
	}
	return s
}

// engineFinding says what the supervisor runs inside and the memory limit
// that holds the kernel there; ok is false on a plain host.
func engineFinding(e engine.Engine, l cgroup.Layout, outer *cgroup.OuterMemory) (Finding, bool) {
	switch e.Kind {
	case engine.Slurm:
		return Finding{Topic: "engine", Text: fmt.Sprintf("inside %s (%s)", e, e.Why)}, true
	case engine.Container:
		limit := "the container has no memory limit: a kernel can take all the host's memory"
		if outer != nil && outer.Limit > 0 {
			limit = fmt.Sprintf("the container's memory limit of %s (%s) holds every kernel; a cell killed at it is told so", bytesize.Format(outer.Limit), outer.Dir)
		}
		why := e.Why
		if e.Rootless {
			why += fmt.Sprintf("; uid 0 here is uid %d on the host", e.HostUID)
			if l.V1["memory"] != "" {
				n, dir := outer.Of()
				limit = e.ContainerLimit(n, dir, true)
			}
		}
		return Finding{Topic: "engine", Text: fmt.Sprintf("inside %s (%s); %s", e, why, limit)}, true
	}
	return Finding{}, false
}
