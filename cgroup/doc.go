// Package cgroup contains one kernel's process tree: it tells which processes
// belong to the tree, kills all of them, and waits until none is alive
// (docs/design.md#containment).
//
// # What it owns
//
// Every containment mode (proc, v2, the v1 freezer, the systemd scope) and
// the choice between them (Open, Fallback); memory limits; tree tracking
// and killing, also of a tree another process made (DestroyV2, DestroyV1);
// and the project's one reader of cgroup.procs (Procs). Processes
// themselves (/proc, the child subreaper, the Reaper, tree markers) are
// package internal/proc's. Nothing here is Jupyter-specific: the package
// does not know what a kernel, a connection file or a GPU is. Policy (grace
// periods, when to kill, what to tell the user) lives in the wrapper
// package.
//
// # Tree
//
// A Tree is the containment of one process tree, whose first process is
// called the leader. The caller
//
//  1. calls Configure on the SysProcAttr it will spawn the leader with,
//  2. spawns the leader (with proc.Reaper.StartProcess) and calls Started(pid),
//  3. calls Kill when the tree must go: Kill returns once no process of the
//     tree is alive (zombies count as dead), or when its context ends, with
//     an error that says how many survive,
//  4. calls Close.
//
// Kill and Close are idempotent. Kill is safe when the leader is already dead,
// before Started (it kills nothing) and concurrently with Pids. Configure
// sets only the fields it owns (Setpgid, Pgid; UseCgroupFD and CgroupFD in
// v2 mode) and leaves the others, such as Pdeathsig, alone.
//
// Modes. "proc" (NewProcTree) needs no cgroup: the leader gets its own
// process group, the supervisor is a child subreaper (proc.SetChildSubreaper, to
// be called once before any spawn), and the tree is found by scanning
// /proc: a process belongs to the tree when its parent chain reaches the
// leader, or reaches the supervisor (an orphan of the tree re-parented to the
// subreaper after a double fork or setsid), or when it is in the leader's
// process group. Kill repeats {scan; SIGSTOP all; SIGKILL all} until a scan
// finds no live member; stopping first freezes a process that forks while it
// is being killed. The cgroup v2 mode (below), v1 and the systemd scope
// implement the same Tree interface; a Launcher (the scope) also rewrites
// the leader's command.
//
// Limits of the proc mode: a process that leaves the tree's process group
// and whose ancestors all die before proc.SetChildSubreaper was called is lost
// (re-parented to init); pids are numbers, so a process that dies between a
// scan and its kill and whose pid is reused at once in that gap could be
// signalled (pid_max wrap-around within milliseconds); children the
// supervisor starts that are not the leader are claimed by the tree unless
// excluded with WithExclude (pass proc.Reaper.Owns).
//
// # Cgroup v2 mode
//
// "v2" (NewV2Tree) gives the tree a cgroup of its own, parent/tfgpu-NAME,
// in the cgroup2 hierarchy; DetectLayout says where that is (pure v2 at
// /sys/fs/cgroup, or the unified tree at /sys/fs/cgroup/unified on hybrid
// hosts) and which cgroup the supervisor is in (Layout.V2Self), the natural
// parent. The leader is created inside it by clone3 with CLONE_INTO_CGROUP
// (SysProcAttr.UseCgroupFD), so no process of the tree is ever outside it.
// Kill writes cgroup.kill and waits, on an inotify watch of cgroup.events,
// for "populated 0"; Close removes the directory. WithoutCloneInto is the
// fallback for hosts that refuse clone3: the leader is moved by writing
// cgroup.procs, which races with its first forks, so a proc-mode sweep
// backs it up (see WithoutCloneInto).
//
// The parent. Creating a child cgroup and moving processes into it needs
// write access to the parent directory and to cgroup.procs of the common
// ancestor of source and target (cgroup-v2.rst, "Delegation Containment").
// The "no internal processes" rule does not get in the way: it only forbids
// enabling domain controllers in subtree_control of a cgroup that has
// processes, and the supervisor's cgroup has them (the supervisor itself),
// so its subtree_control stays empty and children are plain cgroups without
// controllers. Enabling the memory controller for a limit needs the
// supervisor moved to a leaf of its own first (next increment). On the
// hybrid test machine (kernel 6.x, root, no cgroup namespace) the
// supervisor is in the unified tree's root, "0::/", so the parent is
// /sys/fs/cgroup/unified itself: mkdir, cgroup.procs, cgroup.kill and rmdir
// all work there, no controller but hugetlb is attached to the unified tree
// (memory stays on v1), and cgroup.kill exists in the children although not
// in the root. Older kernels lack cgroup.kill (before 5.14) and
// CLONE_INTO_CGROUP (before 5.7).
//
// Timing. The kernel rate-limits cgroup.events notifications to one per 10
// ms per file (CGROUP_FILE_NOTIFY_MIN_INTV in kernel/cgroup/cgroup.c), so
// the wait for "populated 0" can end up to ~10 ms after the last process
// exited.
//
// # Cgroup v1 freezer mode
//
// "v1" (NewV1Tree) is for hosts without a usable cgroup2 tree. The tree gets
// a cgroup of its own, tfgpu-NAME, in the v1 freezer hierarchy under the
// supervisor's own freezer cgroup (V1SelfDir(l, "freezer")), and one of the
// same name in the pids hierarchy where mounted, for counting (TaskCount)
// and for the kill's fence. v1 has no CLONE_INTO_CGROUP: Started moves the
// leader by writing cgroup.procs, which races with the leader's first
// forks as the v2 fallback does, so a proc-mode sweep backs it up (pass
// WithExclude(proc.Reaper.Owns); it needs the child subreaper). v1 has no
// cgroup.kill, so Kill works in rounds. With the pids cgroup it writes 0 to
// pids.max, so nothing in the tree can fork or clone, SIGKILLs every process
// in cgroup.procs, polls it until empty (a process that was not signalled
// starts another round), puts pids.max back and runs the sweep; it never
// freezes, so a supervisor killed during its Kill (an engine's stop) leaves
// a tree that the engine's own SIGKILL empties. Without the pids cgroup a
// round writes FROZEN to freezer.state and polls until it reads FROZEN (no
// event file; 1 ms growing to 20 ms), SIGKILLs, writes THAWED (a frozen
// process does not act on SIGKILL) and polls as above. A leftover
// cgroup, even one left FROZEN by a supervisor that died during a Kill, is
// emptied and reused. Close removes both directories.
//
// # Memory limit
//
// NewMemoryLimit(layout, name, limit) limits a tree's memory and counts the
// OOM kills the limit causes (Memory). Sizes come from bytesize.Parse, in powers
// of 1024 however spelled ("8G" = "8GB" = "8GiB"). Where the supervisor's v2
// cgroup offers the memory controller (pure v2 hosts), the limit is
// memory.max of the tree's own cgroup (NewV2Memory; create the V2Tree
// first), after enabling memory in the parent's cgroup.subtree_control,
// which cgroup v2 refuses (EBUSY) while the parent has processes of its own
// and is not the root; swap (memory.swap.max) is left alone; OOM kills are
// memory.events oom_kill. On hybrid hosts memory stays a v1 controller (on
// the team's machines the unified tree offers only hugetlb), and the limit
// is a v1 memory cgroup of its own, tfgpu-NAME under the supervisor's own
// memory cgroup (NewV1Memory): memory.limit_in_bytes, then
// memory.memsw.limit_in_bytes to the same value where swap accounting
// exists, so that swapping cannot escape the limit. The leader is moved in
// with Add right after spawn (children forked later inherit it; anything
// forked before the move, and memory charged before it, stay outside). OOM
// kills are memory.oom_control oom_kill (Linux 4.13). Close removes the v1
// cgroup, retrying EBUSY for 2 s while a killed process finishes exiting.
// When no limit can be applied, NewMemoryLimit says why in one line and the
// caller runs without one.
package cgroup
