package proc

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SetChildSubreaper makes the calling process a child subreaper
// (prctl(2) PR_SET_CHILD_SUBREAPER): orphans of its descendants are
// re-parented to it instead of to init, so the proc tree still finds them
// and the Reaper reaps them. Call it once, before spawning.
func SetChildSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set child subreaper: %w", err)
	}
	return nil
}

// ExitStatus is how one child ended, as wait4(2) reported it.
type ExitStatus struct {
	Pid    int
	Status unix.WaitStatus
	Rusage unix.Rusage
}

// String says how the process ended: "exit code 3", "signal SIGKILL",
// "signal SIGSEGV (core dumped)".
func (e ExitStatus) String() string {
	switch ws := e.Status; {
	case ws.Exited():
		return fmt.Sprintf("exit code %d", ws.ExitStatus())
	case ws.Signaled():
		s := "signal " + signalName(ws.Signal())
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	default:
		return fmt.Sprintf("wait status %#x", uint32(ws))
	}
}

// Code is the Unix shell convention: the exit code, or 128+signal for a
// death by signal; -1 for a status that is neither.
func (e ExitStatus) Code() int {
	switch ws := e.Status; {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	default:
		return -1
	}
}

func signalName(sig unix.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("%d", int(sig))
}

// Reaper is the only caller of wait4 in the process; see the package doc.
type Reaper struct {
	mu      sync.Mutex
	waiting map[int]chan ExitStatus // children started by StartProcess, not yet reaped
	stopped bool

	orphans atomic.Uint64

	sigc     chan os.Signal
	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// StartReaper starts reaping. It reaps on each SIGCHLD (signal.Notify; no
// polling timer), until wait4 says no exited child is left.
func StartReaper() *Reaper {
	r := &Reaper{
		waiting: make(map[int]chan ExitStatus),
		sigc:    make(chan os.Signal, 1), // SIGCHLDs coalesce: one pending is enough, reap drains all
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	signal.Notify(r.sigc, unix.SIGCHLD)
	go r.loop()
	return r
}

func (r *Reaper) loop() {
	defer close(r.done)
	r.reap() // children that exited before Notify
	for {
		select {
		case <-r.sigc: // one or more children changed state
			r.reap()
		case <-r.quit: // Stop
			return
		}
	}
}

// reap waits for every child that has exited, without blocking.
func (r *Reaper) reap() {
	for {
		var es ExitStatus
		// __WALL: also children whose exit signal is not SIGCHLD (clone(2)).
		pid, err := unix.Wait4(-1, &es.Status, unix.WNOHANG|unix.WALL, &es.Rusage)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			// ECHILD: no children at all; 0: none has exited yet. The next
			// exit raises SIGCHLD, which is pending on r.sigc.
			return
		}
		es.Pid = pid
		r.mu.Lock() // StartProcess holds it from fork to registration
		ch, ok := r.waiting[pid]
		delete(r.waiting, pid)
		r.mu.Unlock()
		if ok {
			ch <- es // buffered 1, sent once: never blocks
		} else {
			r.orphans.Add(1) // re-parented orphan of a tree
		}
	}
}

// StartProcess forks and execs argv0 (syscall.ForkExec) and returns the
// child's pid and a channel that receives its exit status exactly once.
// It forks while holding the Reaper's lock, so the child is registered
// before its status can be looked up, however fast it exits.
func (r *Reaper) StartProcess(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan ExitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return 0, nil, fmt.Errorf("start %s: %w", argv0, ErrReaperStopped)
	}
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return 0, nil, fmt.Errorf("start %s: %w", argv0, err)
	}
	ch := make(chan ExitStatus, 1)
	r.waiting[pid] = ch
	return pid, ch, nil
}

// Owns reports whether pid is a child that StartProcess started and that has
// not been reaped yet. Pass it to cgroup.WithExclude.
func (r *Reaper) Owns(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.waiting[pid]
	return ok
}

// Orphans is the number of children reaped that StartProcess did not start.
func (r *Reaper) Orphans() uint64 { return r.orphans.Load() }

// Drain reaps until this process has no child left but those keep names,
// or for at most timeout; it returns whether none is left. A supervisor
// calls it last, once its tree is killed: Kill returns when the cgroup is
// empty, a moment before the last processes become zombies, and a zombie
// left when the supervisor exits is re-parented to PID 1, which in many
// containers (no --init, the Jupyter server as PID 1) never waits for it
// (#24). A kept child (the standby of a restart) lives on.
func (r *Reaper) Drain(timeout time.Duration, keep ...int) bool {
	deadline := time.Now().Add(timeout)
	for {
		r.reap()
		if !r.othersLeft(keep) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// othersLeft reports whether this process has a child not in keep: from
// /proc/self/task/*/children (each thread's children), else, without that
// file, whether it has any child at all.
func (r *Reaper) othersLeft(keep []int) bool {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			tasks = nil
			break
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(keep, pid) {
				return true
			}
		}
	}
	if len(tasks) > 0 {
		return false
	}
	var info unix.Siginfo
	// WNOWAIT: look, leave the reaping to reap (and its channels).
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
	return !errors.Is(err, unix.ECHILD)
}

// Stop stops reaping and returns when the reaping goroutine has ended.
// Children still running are no longer reaped, and their channels never
// receive. Idempotent.
func (r *Reaper) Stop() {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.stopped = true
		r.mu.Unlock()
		signal.Stop(r.sigc)
		close(r.quit)
		<-r.done
	})
}
