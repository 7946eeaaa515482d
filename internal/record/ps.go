package record

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// Kernel states, as `tfgpu-kernel ps` shows them, besides the phases the
// supervisor records (PhaseStarting, PhaseRunning, PhaseStopping).
const (
	StateHung   = "hung"   // the supervisor is stopped (SIGSTOP, a debugger)
	StateDirty  = "dirty"  // the supervisor is gone; its tree may not be
	StateFrozen = "frozen" // its v1 freezer cgroup is left FROZEN: its processes cannot run or die
)

// KernelStatus is one row of `tfgpu-kernel ps`.
type KernelStatus struct {
	KernelID      string    `json:"kernel_id"`
	Session       string    `json:"session"` // JPY_SESSION_NAME: the notebook, "" when the server does not say
	SupervisorPID int       `json:"supervisor_pid"`
	KernelPID     int       `json:"kernel_pid"`
	PIDs          []int     `json:"pids"`      // the kernel's tree (RoleKernel, RoleTree)
	RSSBytes      int64     `json:"rss_bytes"` // resident memory of the tree's processes
	State         string    `json:"state"`
	Containment   string    `json:"containment"`
	Cgroup        string    `json:"cgroup,omitempty"`
	Started       time.Time `json:"started"`
	GPU           []GPUUse  `json:"gpu"`
	// Escaped are the tree's processes that left its cgroup (a delegated
	// cgroup lets them): found by ancestry, counted in PIDs, RSS and GPU.
	// The kernel's other processes (its watcher, standby, spare) never
	// are: they are outside its cgroup by design.
	Escaped []int `json:"escaped,omitempty"`
	// Processes are all the kernel's live processes, each in its role
	// (Census): the process Jupyter launched, the supervisor, the
	// watchers, the kernel's tree, the standby and its spare.
	Processes []Member `json:"processes"`
	// ExecutionState is ExecBusy or ExecIdle while the supervisor runs the
	// kernel, PhaseStarting before the kernel answers, ExecUnknown
	// otherwise; LastActivity is when it last changed (for an idle kernel,
	// when its last cell ended), null when unknown.
	ExecutionState string     `json:"execution_state"`
	LastActivity   *time.Time `json:"last_activity"`
	UID            int        `json:"uid"`  // the record's owner
	User           string     `json:"user"` // its name, or the uid when it has none
	// Parked is what its supervisor recorded of a parked kernel (State
	// PhaseParked): when, by whom, why, and a hold.
	Parked *Parked `json:"parked,omitempty"`
	// Why says what happened to a dirty or frozen kernel, as far as the
	// running system tells: "ended with its Slurm job 12", "its processes
	// are frozen (…)".
	Why string `json:"why,omitempty"`
	// Spare is the spare kernel kept for its next restart, if any
	// (docs/design.md#spare-kernel).
	Spare *SpareStatus `json:"spare,omitempty"`
	// Placement is the GPUs --gpus auto gave the kernel (a claim of its
	// supervisor's record, shown, never acted on).
	Placement *Placement `json:"placement,omitempty"`
}

// SpareStatus is a kernel's spare, as ps shows it.
type SpareStatus struct {
	PID        int       `json:"pid"`
	StandbyPID int       `json:"standby_pid"`
	RSSBytes   int64     `json:"rss_bytes"` // the spare's, its standby's and the standby's watcher's
	Ready      time.Time `json:"ready"`
	Preload    []string  `json:"preload,omitempty"`
	Off        string    `json:"off,omitempty"` // why the kernel keeps none
}

// GPUUse is a kernel's memory on one device: the sum of the NVML entries
// of its tree's processes (-1 when NVML gives no figure).
type GPUUse struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	UsedBytes int64  `json:"used_bytes"`
}

// PS lists the kernels of states (Collect) with their processes, memory and
// GPU memory, from one scan of /proc however many records there are.
// gpuNote says why GPU memory is not shown, when it is not.
func PS(states []State, nvmlLibrary string) (rows []KernelStatus, gpuNote string) {
	sn, _ := proc.TakeSnapshot() // nil: each tree is read on its own
	var holders []gpu.Holder
	n := gpu.Connect(nvmlLibrary, "")
	defer n.Close()
	holders, gerr := n.Holders()
	switch {
	case gerr != nil:
		gpuNote = gerr.Error()
	case gpu.Mode(holders) == gpu.ByBaseline:
		gpuNote = "NVML's pids are not this PID namespace's: GPU memory cannot be attributed from here"
		holders = nil
	}
	names := map[int]string{} // one lookup per user: NSS may be LDAP
	for _, k := range Census(states, sn) {
		st := k.State
		if _, ok := names[st.Owner]; !ok {
			names[st.Owner] = UserName(st.Owner)
		}
		rows = append(rows, k.status(holders, names[st.Owner]))
	}
	slices.SortFunc(rows, func(a, b KernelStatus) int { return a.Started.Compare(b.Started) })
	return rows, gpuNote
}

// status is k's row of ps, with the GPU memory its tree holds in holders;
// user is the name of the record's owner.
func (k Kernel) status(holders []gpu.Holder, user string) KernelStatus {
	st := k.State
	row := KernelStatus{KernelID: st.KernelID, Session: Printable(st.Session), SupervisorPID: st.SupervisorPID,
		KernelPID: st.KernelPID, State: Printable(st.Phase), Containment: Printable(st.Containment), Cgroup: Printable(st.Cgroup),
		Started: st.Started, GPU: []GPUUse{}, Processes: k.Members}
	if row.Processes == nil {
		row.Processes = []Member{}
	}
	switch {
	case k.RoleOf(st.SupervisorPID) != RoleSupervisor:
		row.State = StateDirty
	case st.SupervisorStopped():
		row.State = StateHung
	case row.State == "":
		row.State = PhaseRunning // written by a version without phases
	}
	row.ExecutionState = ExecUnknown
	switch {
	case st.Activity == nil || (row.State != PhaseRunning && row.State != PhaseStarting):
	case row.State == PhaseStarting:
		row.ExecutionState = PhaseStarting
	default:
		row.ExecutionState = st.Activity.State()
		since := st.Activity.Since
		row.LastActivity = &since
	}
	row.UID, row.User = st.Owner, user
	if row.State == PhaseParked {
		row.Parked = st.Parked
	}
	row.PIDs, row.Escaped = k.Pids(TreeRoles...), k.Escaped
	if row.PIDs == nil {
		row.PIDs = []int{}
	}
	if row.State == StateDirty {
		row.Why = st.DeadWhy()
	}
	if why := st.Frozen(); why != "" {
		row.State, row.Why = StateFrozen, why
	}
	row.RSSBytes = k.RSS(TreeRoles...)
	held := gpu.Holding(holders, row.PIDs)
	for dev, used := range gpu.Sum(held) {
		i := slices.IndexFunc(held, func(h gpu.Holder) bool { return h.Device == dev })
		row.GPU = append(row.GPU, GPUUse{Index: dev, UUID: held[i].UUID, UsedBytes: used})
	}
	slices.SortFunc(row.GPU, func(a, b GPUUse) int { return a.Index - b.Index })
	row.Placement = st.Placement.shown()
	if sp := k.Spare; sp != nil {
		row.Spare = &SpareStatus{PID: sp.PID, StandbyPID: sp.StandbyPID, Ready: sp.Ready, Preload: sp.Preload,
			Off: Printable(sp.Off), RSSBytes: k.RSS(SpareRoles...)}
	}
	return row
}

// UserName is uid's login name, or the uid when it has none.
func UserName(uid int) string {
	id := strconv.Itoa(uid)
	if u, err := user.LookupId(id); err == nil && u.Username != "" {
		return Printable(u.Username)
	}
	return id
}

// TreePids are the live processes of a recorded kernel's tree (Census's
// RoleKernel and RoleTree): its cgroup's, or, without one, the kernel's
// process tree as its supervisor (the subreaper) sees it, but for the
// kernel's other processes; with a cgroup, also the tree's processes that
// left it (see treeIn).
func (st State) TreePids() []int {
	return st.census(st.spareRecord(), nil).Pids(TreeRoles...)
}

// treeIn is the kernel's tree from the snapshot sn (nil: a scan of its
// own), and which of them escaped: processes of the kernel's process tree
// under its live supervisor that are not in its cgroup. other says which
// of the supervisor's children are the kernel's other processes (its
// watcher, its standby), left out with their descendants.
func (st State) treeIn(sn *proc.Snapshot, other func(pid int) bool) (pids, escaped []int) {
	owner := proc.Owner
	if sn != nil {
		owner = sn.Owner
	}
	var inCgroup []int
	if st.Cgroup != "" {
		inCgroup = []int{} // a cgroup that is gone (or refused) is empty
		cg, err := st.checkedCgroup()
		if err != nil || cg == "" || !st.thisBoot() {
			return inCgroup, nil
		}
		if procs, err := cgroup.Procs(cg); err == nil {
			inCgroup = append(inCgroup, procs...)
		}
		inCgroup = st.ownersOnly(inCgroup, owner)
	}
	if sn == nil {
		var err error
		if sn, err = proc.TakeSnapshot(); err != nil {
			if inCgroup == nil {
				inCgroup = []int{}
			}
			return inCgroup, nil
		}
		owner = sn.Owner
	}
	var tree []int
	switch {
	case !st.SupervisorAlive() && st.Cgroup == "" && st.validMarker():
		// The supervisor (the subreaper) is gone; its tree is what carries
		// its marker.
		tree = sn.Marked(st.Marker, st.Owner)
	case !st.owns(st.KernelPID, st.KernelStart):
		// The kernel is gone (a reused pid is someone else's): what is
		// left is the cgroup's.
	case st.Cgroup != "" && !st.SupervisorAlive():
		// Without the subreaper the process tree says nothing more.
	default:
		// The supervisor is the subreaper whose children are the tree's
		// orphans, but only when it is the record owner's, alive, with its
		// recorded start time: a record naming another process (pid 1, or
		// any subreaper's) as its "supervisor" would claim that process's
		// children.
		sup := -1
		if st.SupervisorAlive() {
			sup = st.SupervisorPID
		}
		tree = st.ownersOnly(sn.Tree(sup, st.KernelPID, other), owner)
	}
	if st.Cgroup == "" {
		slices.Sort(tree)
		return tree, nil
	}
	pids = inCgroup
	for _, p := range tree {
		if !slices.Contains(pids, p) {
			pids = append(pids, p)
			escaped = append(escaped, p)
		}
	}
	slices.Sort(pids)
	slices.Sort(escaped)
	return pids, escaped
}

// ownersOnly keeps the pids the record's owner owns: whatever a record
// says, ps never names another user's process as a kernel's, nor counts
// its memory or GPU memory.
func (st State) ownersOnly(pids []int, owner func(int) int) []int {
	out := pids[:0]
	for _, p := range pids {
		if owner(p) == st.Owner {
			out = append(out, p)
		}
	}
	return out
}

// uniqueDirs is dir, then each of candidates that is a directory (not a
// link) and not one already listed under another path: the same directory
// reached twice (a user's home linked to another's) would list its
// kernels twice and make an exact id look ambiguous. Directories are told
// apart by device and inode.
func uniqueDirs(dir string, candidates []string) []string {
	dirs := []string{dir}
	type key struct{ dev, ino uint64 }
	seen := map[key]bool{}
	if fi, err := os.Stat(dir); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			seen[key{uint64(st.Dev), st.Ino}] = true
		}
	}
	for _, d := range candidates {
		if d == dir || slices.Contains(dirs, d) {
			continue
		}
		li, err := os.Lstat(d)
		if err != nil || !li.IsDir() {
			continue // gone, or a link: OpenDir would refuse it anyway
		}
		fi, err := os.Stat(d)
		st, ok := fi.Sys().(*syscall.Stat_t)
		if err != nil || !ok || seen[key{uint64(st.Dev), st.Ino}] {
			continue
		}
		seen[key{uint64(st.Dev), st.Ino}] = true
		dirs = append(dirs, d)
	}
	return dirs
}

// DeadWhy says what is known of why a dead supervisor's kernel ended:
// "ended with its Slurm job 12" once the job's cgroups are gone (Slurm
// removes them when the job ends, after SIGKILLing the step, supervisor
// and watcher included); "" when nothing is known.
func (st State) DeadWhy() string {
	switch {
	case st.Slurm.Ended():
		return "ended with its Slurm job " + Printable(st.Slurm.Job)
	case st.Slurm != nil:
		return "its supervisor is gone; it ran in Slurm job " + Printable(st.Slurm.Job)
	}
	return ""
}

// Frozen says why st's tree is frozen, "" when it is not: its v1 freezer
// cgroup reads FROZEN (or FREEZING) with processes in it, as a supervisor
// SIGKILLed between its freeze and its thaw leaves it, watcher and all
// (an engine's kill of the whole job). Frozen processes neither run nor
// die, not even of SIGKILL, until thawed: `stop` thaws and kills them.
func (st State) Frozen() string {
	if st.Containment != cgroup.ModeV1 || st.Cgroup == "" {
		return ""
	}
	dir, err := st.checkedCgroup()
	if err != nil || dir == "" {
		return ""
	}
	state, err := cgroup.FreezerState(dir)
	if err != nil || (state != "FROZEN" && state != "FREEZING") {
		return ""
	}
	pids, _ := cgroup.Procs(dir)
	if len(pids) == 0 {
		return ""
	}
	return fmt.Sprintf("its %d process(es) are frozen (%s/freezer.state reads %s): tfgpu-kernel stop %s thaws and kills them",
		len(pids), Printable(st.Cgroup), state, st.KernelID)
}
