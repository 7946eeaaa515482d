package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// V2Tree is the "v2" mode: the tree is a child cgroup of its own in the
// cgroup2 hierarchy. Membership is the kernel's, so nothing escapes by
// double-forking, setsid or re-parenting; kill is cgroup.kill, and the tree
// is dead when cgroup.events says "populated 0".
type V2Tree struct {
	dir       string
	opts      v2Options
	dirFD     int // open directory, for CLONE_INTO_CGROUP; -1 once closed
	leftovers int // processes of a dead supervisor killed by NewV2Tree

	killMu sync.Mutex // one Kill at a time

	mu       sync.Mutex
	leader   int
	startErr error // fallback: the leader could not be moved in
	sweep    Tree  // proc mode, for processes that left the cgroup or escaped the move
	escaped  []int // what the sweep found outside the cgroup at the last Pids
	closed   bool
	removed  bool
}

var _ Tree = (*V2Tree)(nil)

// V2Option configures NewV2Tree.
type V2Option func(*v2Options)

type v2Options struct {
	noCloneInto bool
	withSweep   bool
	adopted     bool // AdoptV2: someone else created the cgroup and put the leader in it
	sweep       []ProcOption
}

// WithoutCloneInto makes Configure leave UseCgroupFD off, so the leader is
// started in the supervisor's cgroup and Started moves it by writing its pid
// to cgroup.procs. Use it where clone3 is refused (seccomp filters that
// answer ENOSYS or EPERM, kernels before 5.7). The move races with the
// leader: a child it forks between its exec and the write stays outside the
// tree. The window is not small: the write takes the cgroup threadgroup
// rwsem for writing, which waits for an RCU grace period (milliseconds to
// tens of them), and on the test machine the leader's first children were
// regularly forked before it was moved. So this mode also keeps a proc-mode
// tree (NewProcTree with the supervisor's pid and sweep's options: pass
// WithExclude(proc.Reaper.Owns)) that Pids and Kill use after the cgroup, to find
// processes that escaped; like the proc mode it needs the supervisor to be a
// child subreaper. CLONE_INTO_CGROUP (clone3(2)) has no window at all, which
// is why it is the default.
func WithoutCloneInto(sweep ...ProcOption) V2Option {
	return func(o *v2Options) { o.noCloneInto, o.sweep = true, sweep }
}

// WithSweep keeps a proc-mode tree beside the cgroup (as WithoutCloneInto
// does) for the processes that leave it: a cgroup the supervisor's user
// owns (a delegated subtree, a systemd scope) lets any process of the
// kernel write itself into the parent's cgroup.procs. Such a process stays
// a descendant of the kernel, or is reparented to the supervisor (the
// child subreaper) when its parent dies, so the sweep finds it: Pids
// counts it (the GPU limit, the release check), Kill kills it, and
// Escaped says it left (docs/security.md#threats, class 5, attack L).
func WithSweep(sweep ...ProcOption) V2Option {
	return func(o *v2Options) { o.withSweep, o.sweep = true, sweep }
}

// NewV2Tree creates the cgroup parent/tfgpu-<name> (parent must be a
// directory of a cgroup2 hierarchy, such as Layout.V2Self) and returns the
// Tree for it.
//
// If the cgroup exists already it is a leftover, from a supervisor of the
// same name that died without cleaning up: its processes are killed and
// waited for (until ctx ends), and the cgroup is removed and created anew
// (Leftovers says how many were killed). Deciding whether the
// old processes may be killed, and reaping cgroups of other names, is policy
// for the caller.
func NewV2Tree(ctx context.Context, parent, name string, opts ...V2Option) (*V2Tree, error) {
	return newV2Tree(ctx, parent, name, false, opts...)
}

func newV2Tree(ctx context.Context, parent, name string, retried bool, opts ...V2Option) (*V2Tree, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("create cgroup: bad name %q", name)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(parent, &st); err != nil {
		return nil, fmt.Errorf("create cgroup under %s: %w", parent, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("create cgroup under %s: not a cgroup2 file system", parent)
	}
	t := &V2Tree{dir: filepath.Join(parent, "tfgpu-"+name), dirFD: -1}
	for _, o := range opts {
		o(&t.opts)
	}
	if t.opts.noCloneInto || t.opts.withSweep {
		t.sweep = NewProcTree(os.Getpid(), t.opts.sweep...)
	}
	leftover := false
	if err := os.Mkdir(t.dir, 0o755); errors.Is(err, os.ErrExist) {
		leftover = true
	} else if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", t.dir, err)
	}
	fd, err := unix.Open(t.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if !leftover {
			_ = os.Remove(t.dir)
		}
		return nil, fmt.Errorf("open cgroup %s: %w", t.dir, err)
	}
	t.dirFD = fd
	if leftover {
		n, err := t.Kill(ctx)
		if err != nil {
			t.closeFD()
			return nil, fmt.Errorf("clear leftover cgroup: %w", err)
		}
		// A cgroup that has been killed is not reused: on Linux 6.18 a
		// process cloned into it afterwards (CLONE_INTO_CGROUP) was
		// SIGKILLed at birth, 8 ms after spawn, although cgroup.kill had
		// returned and populated was 0. A fresh cgroup has no such history.
		if err := t.Close(); err != nil {
			return nil, fmt.Errorf("clear leftover cgroup: %w", err)
		}
		if retried {
			return nil, fmt.Errorf("create cgroup %s: it keeps reappearing", t.dir)
		}
		fresh, err := newV2Tree(ctx, parent, name, true, opts...)
		if err != nil {
			return nil, err
		}
		fresh.leftovers = n
		return fresh, nil
	}
	return t, nil
}

// AdoptV2 returns the Tree of a cgroup2 directory that someone else made
// and put the leader in: a systemd scope, which systemd-run creates around
// its own process before it execs the command. Configure then only sets the
// process group; Kill and Pids work as for NewV2Tree, and Close removes the
// directory if it is still there (systemd removes an empty scope's cgroup
// itself, and tolerates finding it gone).
func AdoptV2(dir string) (*V2Tree, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("adopt cgroup %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("adopt cgroup %s: not a cgroup2 file system", dir)
	}
	if err := unix.Access(filepath.Join(dir, "cgroup.kill"), unix.W_OK); err != nil {
		return nil, fmt.Errorf("adopt cgroup %s: cannot write cgroup.kill: %w", dir, err)
	}
	return &V2Tree{dir: dir, dirFD: -1, opts: v2Options{adopted: true, noCloneInto: true}}, nil
}

// Leftovers is how many processes of a dead supervisor's cgroup of the same
// name NewV2Tree killed.
func (t *V2Tree) Leftovers() int { return t.leftovers }

// Dir is the cgroup's directory.
func (t *V2Tree) Dir() string { return t.dir }

func (t *V2Tree) Mode() string { return ModeV2 }

// Configure puts the leader in a new process group (as the proc mode does,
// so that the wrapper can signal the group) and, unless WithoutCloneInto,
// has the leader created inside the cgroup: clone3 with CLONE_INTO_CGROUP,
// which Go uses when UseCgroupFD is set. The fd stays open until Close.
func (t *V2Tree) Configure(attr *syscall.SysProcAttr) error {
	if err := checkGroupAttr(attr, "cgroup tree"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("configure cgroup tree %s: %w", t.dir, ErrClosed)
	}
	attr.Setpgid, attr.Pgid = true, 0
	if !t.opts.noCloneInto {
		attr.UseCgroupFD, attr.CgroupFD = true, t.dirFD
	}
	return nil
}

// Started records the leader. With WithoutCloneInto it moves the leader into
// the cgroup; if that fails (the leader already exited: ESRCH), its children
// may be outside, and Kill reports the error after killing what is inside.
func (t *V2Tree) Started(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leader = pid
	if t.sweep != nil {
		t.sweep.Started(pid)
	}
	if t.opts.noCloneInto && !t.opts.adopted && !t.closed && pid > 0 {
		if err := writeFile(filepath.Join(t.dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			t.startErr = fmt.Errorf("move leader %d into cgroup %s: %w", pid, t.dir, err)
		}
	}
}

// Pids reads cgroup.procs: the processes in the cgroup (exited processes,
// zombies, are no longer listed there); with a sweep (WithSweep,
// WithoutCloneInto), also those it finds outside it.
func (t *V2Tree) Pids() ([]int, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("list cgroup %s: %w", t.dir, ErrClosed)
	}
	pids, err := readProcs(t.dir)
	if errors.Is(err, os.ErrNotExist) {
		pids, err = nil, nil // removed, so empty
	}
	if err != nil {
		return nil, fmt.Errorf("list cgroup %s: %w", t.dir, err)
	}
	if t.sweep != nil {
		more, err := t.sweep.Pids()
		if err != nil {
			return nil, fmt.Errorf("list cgroup %s: sweep: %w", t.dir, err)
		}
		var out []int
		pids, out = addOutside(pids, more)
		t.mu.Lock()
		t.escaped = out
		t.mu.Unlock()
	}
	return pids, nil
}

// addOutside adds to pids (a cgroup's) those of more (a sweep's) it lacks,
// and returns them apart too: the tree's processes outside the cgroup.
func addOutside(pids, more []int) (all, outside []int) {
	for _, p := range more {
		if !slices.Contains(pids, p) {
			pids = append(pids, p)
			outside = append(outside, p)
		}
	}
	return pids, outside
}

// Escaped lists the processes the last Pids found outside the cgroup by
// the sweep (WithSweep, WithoutCloneInto): processes of the tree that left
// it, or, without CLONE_INTO_CGROUP, were forked before the leader moved.
func (t *V2Tree) Escaped() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.escaped)
}

// Kill writes "1" to cgroup.kill, which SIGKILLs every process of the cgroup
// and its descendants, including processes being forked at that moment
// (Documentation/admin-guide/cgroup-v2.rst), then waits until cgroup.events
// says "populated 0": a process leaves the cgroup when it exits, before it
// is reaped, so zombies do not keep the cgroup populated. The wait is an
// inotify watch on cgroup.events (the kernel notifies it as a file
// modification), not a polling loop. killed is the number of processes in
// cgroup.procs just before the kill, plus those the sweep killed.
func (t *V2Tree) Kill(ctx context.Context) (int, error) {
	t.mu.Lock()
	closed, startErr := t.closed, t.startErr
	t.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("kill cgroup %s: %w", t.dir, ErrClosed)
	}
	t.killMu.Lock()
	defer t.killMu.Unlock()
	killed, err := t.killCgroup(ctx)
	if err != nil {
		return killed, fmt.Errorf("kill cgroup %s: %w", t.dir, err)
	}
	if t.sweep != nil {
		n, err := t.sweep.Kill(ctx)
		killed += n
		if err != nil {
			return killed, fmt.Errorf("kill cgroup %s: sweep: %w", t.dir, err)
		}
	}
	if startErr != nil && t.sweep == nil {
		return killed, fmt.Errorf("kill cgroup %s: the tree may have escaped: %w", t.dir, startErr)
	}
	return killed, nil
}

func (t *V2Tree) killCgroup(ctx context.Context) (int, error) {
	w, err := watchEvents(t.dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil // removed, so empty: rmdir(2) refuses a populated cgroup
	}
	if err != nil {
		return 0, err
	}
	defer w.Close()
	// Watching before checking: a change after the check is not missed.
	if populated, err := readPopulated(t.dir); err != nil || !populated {
		return 0, err
	}
	pids, err := readProcs(t.dir)
	if err != nil {
		return 0, err
	}
	// Even when ctx has ended already: kill first, then report the ctx.
	// Before cgroup.kill (Linux 5.14) this fails with ENOENT; the v1-style
	// freeze-and-kill loop for those kernels is not implemented.
	if err := writeFile(filepath.Join(t.dir, "cgroup.kill"), "1"); err != nil {
		return 0, err
	}
	for {
		populated, err := readPopulated(t.dir)
		if err != nil {
			return len(pids), err
		}
		if !populated {
			return len(pids), nil
		}
		if err := w.wait(ctx); err != nil {
			left, _ := readProcs(t.dir)
			return len(pids), fmt.Errorf("still populated, %d processes: %w", len(left), err)
		}
	}
}

// Close removes the cgroup directory (and any sub-cgroups the tree made),
// which fails with EBUSY while a process is in it: call Kill first. Close
// may be called again after a failure; once the directory is gone it
// returns nil.
func (t *V2Tree) Close() error {
	t.killMu.Lock() // not while a Kill is waiting
	defer t.killMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.closeFDLocked()
	if t.sweep != nil {
		t.sweep.Close()
	}
	if t.removed {
		return nil
	}
	if err := removeCgroup(t.dir); err != nil {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	t.removed = true
	return nil
}

func (t *V2Tree) closeFD() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closeFDLocked()
}

func (t *V2Tree) closeFDLocked() {
	if t.dirFD >= 0 {
		unix.Close(t.dirFD)
		t.dirFD = -1
	}
}

// removeCgroup removes dir and the cgroups below it, deepest first. A
// cgroup directory holds only the kernel's interface files, which rmdir(2)
// removes with it.
func removeCgroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroup(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}

// readProcs reads the pids in dir/cgroup.procs.
func readProcs(dir string) ([]int, error) { return Procs(dir) }

// Procs reads the pids in dir/cgroup.procs, without following a link in
// its last component and at most 1 MiB of it: dir may come from a record
// another user could have written (docs/security.md).
func Procs(dir string) ([]int, error) {
	path := filepath.Join(dir, "cgroup.procs")
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, field := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(field)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// readPopulated reads the "populated" key of dir/cgroup.events.
func readPopulated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v == "1", nil
		}
	}
	return false, fmt.Errorf("parse %s/cgroup.events: no populated key", dir)
}

// writeFile writes s to an existing cgroup interface file. One write(2):
// cgroup files take one value per write.
func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(s)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// eventsWatch is an inotify watch on dir/cgroup.events. Its fd is
// non-blocking and handed to the Go poller (os.NewFile), so a wait parks a
// goroutine, not a thread, and a read deadline ends it.
type eventsWatch struct{ f *os.File }

func watchEvents(dir string) (*eventsWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(dir, "cgroup.events"), unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s/cgroup.events: %w", dir, err)
	}
	return &eventsWatch{f: os.NewFile(uintptr(fd), "inotify:"+dir)}, nil
}

// wait returns after the next modification of cgroup.events (events that
// queued up meanwhile are drained in the same read), or ctx's error.
func (w *eventsWatch) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 4096)
	_, err := w.f.Read(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (w *eventsWatch) Close() error { return w.f.Close() }

// DestroyV2 kills every process in the cgroup dir (one NewV2Tree made,
// perhaps in another process), waits until it is empty, and removes it:
// for `tfgpu-kernel stop` and for reaping cgroups of dead supervisors. It
// returns how many processes were in it. A dir that is gone is not an error.
func DestroyV2(ctx context.Context, dir string) (int, error) {
	t := &V2Tree{dir: dir, dirFD: -1}
	n, err := t.killCgroup(ctx)
	if err != nil {
		return n, fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	if err := removeCgroup(dir); err != nil {
		return n, fmt.Errorf("remove cgroup: %w", err)
	}
	return n, nil
}
