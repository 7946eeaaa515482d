package record

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// One kernel, however many processes (docs/design.md#processes). A kernel
// is one identity, its owner and its id (Key), for its whole life: across
// the process Jupyter launched, the supervisor, its watcher, the standby
// kept for its next restart with its own watcher and spare, and every
// fresh generation after a restart, an adoption or a park. Which live
// processes are that kernel, and in which role, is answered here and only
// here (Census); ps, stop, doctor, the metrics and uninstall ask it.
//
// The answer is built from the kernel's record and its spare's record,
// each of which names its processes with their start times, and every
// name is checked against /proc (alive, that start time, the record's
// owner's) before it is believed: a record is a claim (check.go).

// Role is what a process is to its kernel.
type Role string

const (
	// RoleSupervisor supervises the kernel now: the process Jupyter
	// launched, or a standby that took over its start.
	RoleSupervisor Role = "supervisor"
	// RoleStub is the process Jupyter launched once a standby took over
	// its start: it forwards signals and exits with the supervisor's code.
	RoleStub Role = "stub"
	// RoleWatcher finishes the kernel should its supervisor be SIGKILLed.
	RoleWatcher Role = "watcher"
	// RoleKernel is the kernel process, the leader of its tree.
	RoleKernel Role = "kernel"
	// RoleTree is any other process of the kernel's tree.
	RoleTree Role = "tree"
	// RoleStandby waits, with a spare kernel, to supervise the kernel's
	// next restart (docs/design.md#spare-kernel).
	RoleStandby Role = "standby"
	// RoleStandbyWatcher is the standby's watcher.
	RoleStandbyWatcher Role = "standby-watcher"
	// RoleSpare is the standby's spare kernel, and what it started.
	RoleSpare Role = "spare"
)

// Key names a kernel across its processes and generations: its owner and
// its id. Kernel ids are public (every supervisor's command line shows
// one) and two users' kernels may share one; with the owner they do not.
type Key struct {
	UID int
	ID  string
}

// Key is the kernel st records.
func (st State) Key() Key { return Key{UID: st.Owner, ID: st.KernelID} }

// Member is a live process of a kernel, in its role.
type Member struct {
	PID      int    `json:"pid"`
	Role     Role   `json:"role"`
	RSSBytes int64  `json:"rss_bytes"`
	Start    uint64 `json:"-"`
}

// Kernel is one kernel as the running system shows it: its record, its
// spare's record (nil: none, or none that checks out), its live processes
// by role, and the processes of its tree that left its cgroup.
type Kernel struct {
	State   State
	Spare   *Spare
	Members []Member
	// Escaped are the tree's processes that left its cgroup (a delegated
	// cgroup lets them): found by ancestry below its live supervisor, and
	// members (RoleTree) too. The kernel's other roles are never among
	// them.
	Escaped []int
}

// Key is the kernel's identity.
func (k Kernel) Key() Key { return k.State.Key() }

// Pids lists the members in any of roles (all of them when none is
// given), sorted.
func (k Kernel) Pids(roles ...Role) []int {
	var out []int
	for _, m := range k.Members {
		if len(roles) == 0 || slices.Contains(roles, m.Role) {
			out = append(out, m.PID)
		}
	}
	slices.Sort(out)
	return out
}

// RoleOf is pid's role in the kernel, "" when it is not one of its
// processes.
func (k Kernel) RoleOf(pid int) Role {
	for _, m := range k.Members {
		if m.PID == pid {
			return m.Role
		}
	}
	return ""
}

// Launched is the live process Jupyter launched for the kernel's current
// generation, whose command line is the kernelspec's: the stub of a
// standby that took over its start, else the supervisor; 0 when neither
// lives.
func (k Kernel) Launched() int {
	if p := k.Pids(RoleStub); len(p) > 0 {
		return p[0]
	}
	if p := k.Pids(RoleSupervisor); len(p) > 0 {
		return p[0]
	}
	return 0
}

// RSS is the resident memory of the members in any of roles.
func (k Kernel) RSS(roles ...Role) int64 {
	var n int64
	for _, m := range k.Members {
		if len(roles) == 0 || slices.Contains(roles, m.Role) {
			n += m.RSSBytes
		}
	}
	return n
}

// TreeRoles are the roles of the kernel's own tree: what ps counts, what
// a stop kills and what GPU memory is attributed to.
var TreeRoles = []Role{RoleKernel, RoleTree}

// SpareRoles are the roles of the spare and its standby: what the next
// restart uses, outside the kernel's tree.
var SpareRoles = []Role{RoleStandby, RoleStandbyWatcher, RoleSpare}

// Census is the kernels of states, each with its processes by role, from
// the snapshot sn (nil: one is taken). The spare record of each is read
// from the directory its record came from.
func Census(states []State, sn *proc.Snapshot) []Kernel {
	if sn == nil {
		sn, _ = proc.TakeSnapshot() // nil still: each tree is read on its own
	}
	out := make([]Kernel, 0, len(states))
	for _, st := range states {
		out = append(out, st.census(st.spareRecord(), sn))
	}
	return out
}

// spareRecord is the spare record beside st, when it checks out
// (Dir.ReadSpare).
func (st State) spareRecord() *Spare {
	if st.Dir == "" {
		return nil
	}
	d, err := OpenDir(st.Dir, false, true)
	if err != nil {
		return nil
	}
	defer d.Close()
	return d.ReadSpare(st.KernelID)
}

// census is st's kernel with its members.
func (st State) census(sp *Spare, sn *proc.Snapshot) Kernel {
	k := Kernel{State: st, Spare: sp}
	if sn == nil {
		sn, _ = proc.TakeSnapshot() // nil still: each process is read on its own
	}
	seen := map[int]bool{}
	rss := func(pid int) int64 {
		if sn != nil {
			return sn.RSS(pid)
		}
		return proc.RSS(pid)
	}
	add := func(pid int, start uint64, role Role) bool {
		if pid <= 1 || seen[pid] || !st.owns(pid, start) {
			return false
		}
		seen[pid] = true
		k.Members = append(k.Members, Member{PID: pid, Start: start, Role: role, RSSBytes: rss(pid)})
		return true
	}
	add(st.SupervisorPID, st.SupervisorStart, RoleSupervisor)
	if st.Stub != nil {
		add(st.Stub.PID, st.Stub.Start, RoleStub)
	}
	if st.Watcher != nil {
		add(st.Watcher.PID, st.Watcher.Start, RoleWatcher)
	}
	// The spare and its standby, with what the spare started; checked by
	// ReadSpare already (alive, start times, the owner's).
	if sp != nil && sp.Off == "" {
		add(sp.StandbyPID, sp.StandbyStart, RoleStandby)
		if sp.Watcher != nil {
			add(sp.Watcher.PID, sp.Watcher.Start, RoleStandbyWatcher)
		}
		if add(sp.PID, sp.Start, RoleSpare) && sn != nil {
			for _, p := range st.ownersOnly(sn.Tree(sp.StandbyPID, sp.PID, func(pid int) bool { return seen[pid] }), sn.Owner) {
				if pr, ok := sn.Proc(p); ok {
					add(p, pr.Start, RoleSpare)
				}
			}
		}
	}
	// The kernel's tree: its cgroup's processes, and below a live
	// supervisor its process tree; the kernel's other roles are not in it
	// (a supervisor's watcher and standby are its children too).
	pids, escaped := st.treeIn(sn, func(pid int) bool { return seen[pid] })
	for _, p := range pids {
		role := RoleTree
		if p == st.KernelPID {
			role = RoleKernel
		}
		start := uint64(0)
		if sn != nil {
			if pr, ok := sn.Proc(p); ok {
				start = pr.Start
			}
		} else if pr, err := proc.Read(p); err == nil {
			start = pr.Start
		}
		if !seen[p] {
			seen[p] = true
			k.Members = append(k.Members, Member{PID: p, Start: start, Role: role, RSSBytes: rss(p)})
		}
	}
	for _, p := range escaped {
		if k.RoleOf(p) == RoleTree || k.RoleOf(p) == RoleKernel {
			k.Escaped = append(k.Escaped, p)
		}
	}
	slices.SortFunc(k.Members, func(a, b Member) int {
		if c := roleOrder(a.Role) - roleOrder(b.Role); c != 0 {
			return c
		}
		return a.PID - b.PID
	})
	return k
}

// roleOrder is the order in which roles are listed.
func roleOrder(r Role) int {
	return slices.Index([]Role{RoleStub, RoleSupervisor, RoleWatcher, RoleKernel, RoleTree, RoleStandby, RoleStandbyWatcher, RoleSpare}, r)
}

// ParseKernelName reads how a user names a kernel on the command line:
// "ID", or "USER:ID" (a login name or a uid) to say whose. The id may be
// a unique prefix (the caller decides how short).
func ParseKernelName(s string, lookupUID func(string) (int, error)) (uid int, id string, err error) {
	uid = -1
	user, rest, ok := strings.Cut(s, ":")
	if !ok {
		return uid, s, nil
	}
	if user == "" || rest == "" {
		return uid, "", fmt.Errorf("want ID or USER:ID")
	}
	if uid, err = lookupUID(user); err != nil {
		return -1, "", err
	}
	return uid, rest, nil
}
