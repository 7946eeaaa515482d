// Package proc is the supervisor's view of processes, through /proc and
// wait4: what a process is (its stat, owner, command line, memory and CPU
// figures), which processes form a tree when there is no cgroup to say so,
// and the reaping of the supervisor's children. Package cgroup builds its
// proc mode and its sweeps on this package, which knows nothing of cgroups
// or GPUs.
//
// # What it owns
//
// The project's one reader of /proc/PID/stat: Read, StartTime, and for
// scans of every process StatReader (one reused buffer) and Stat; Members,
// the rules by which a scan's processes belong to the tree of a leader under
// a child subreaper (the proc mode's membership); the figures Owner,
// Cmdline, RSS, PSS, CPU, HasChildren and ReadHostMemory; the child
// subreaper setting (SetChildSubreaper) and the Reaper; tree markers
// (MarkerEnv, NewMarker, KillMarked, KillMarkedSince), which find
// a tree's processes by their environment once their supervisor is gone; and
// Snapshot, one scan of /proc for a caller that asks about many trees at once
// (ps, doctor), with KillRelated.
//
// # What it assumes
//
// Linux, with procfs mounted at /proc and USER_HZ 100 (proc(5)). Pids are
// reused, so a process is named by its pid and start time (Ref, StartTime);
// whatever is read is as of the read: a scan leaves out a process that
// exits meanwhile, and Read says so with an error wrapping os.ErrNotExist.
// A figure of a process that is gone is 0 (or -1
// for Owner). Elsewhere only the Reaper, the subreaper calls, StartTime,
// Cmdline and HasChildren build, as stubs that fail with ErrUnsupported, so
// that go vet runs anywhere.
//
// # Reaper: the one-reaper rule
//
// A subreaper inherits every orphan of the tree; each must be waited for or
// it stays a zombie. The Reaper is the only caller of wait4 in the process:
// on every SIGCHLD it waits for any child until none is left to wait for, and
// delivers each status to whoever started that child through
// Reaper.StartProcess (exactly once, on a channel buffered 1); statuses of
// other children (orphans) are counted and dropped. StartProcess forks while
// holding the Reaper's lock, so a child that exits at once is still
// registered before its status is looked up, and no status is lost.
//
// Consequence: a program that uses the Reaper must not use exec.Cmd.Wait,
// exec.Cmd.Run, os.Process.Wait or any other wait on a child it started: the
// Reaper may reap that child first, and the other wait then fails with ECHILD
// (or, after pid reuse, waits for the wrong process). Start every child with
// Reaper.StartProcess. Stop is idempotent.
package proc
