package cgroup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// ModeV1 is the cgroup v1 freezer mode, as Tree.Mode reports it.
const ModeV1 = "v1"

// V1Tree is the "v1" mode: the tree is a child cgroup of its own in the v1
// freezer hierarchy (and, where mounted, one of the same name in the pids
// hierarchy, for counting). v1 has no CLONE_INTO_CGROUP and no cgroup.kill:
// Started moves the leader by writing cgroup.procs, and Kill freezes the
// cgroup, SIGKILLs every process in it, thaws it and polls until it is
// empty. The move races with the leader's first forks, as the v2 fallback
// does (WithoutCloneInto), so a proc-mode sweep backs it up.
type V1Tree struct {
	dir     string // freezer cgroup
	pidsDir string // pids cgroup, "" when there is none

	killMu sync.Mutex // one Kill at a time

	mu       sync.Mutex
	leader   int
	sweep    Tree // proc mode, for processes that escaped the move
	closed   bool
	removed  bool
	pidsGone bool
}

var _ Tree = (*V1Tree)(nil)

// V1SelfDir returns the directory of this process's own cgroup in the v1
// hierarchy that carries controller ("freezer", "pids"): the controller's
// mount point in l.V1 joined with its path in /proc/self/cgroup, relative to
// the mount's root (from /proc/self/mountinfo). It fails when the controller
// is not mounted or the cgroup is not visible under the mount.
func V1SelfDir(l Layout, controller string) (string, error) {
	mnt := l.V1[controller]
	if mnt == "" {
		return "", fmt.Errorf("find own %s cgroup: controller not mounted", controller)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find own %s cgroup: %w", controller, err)
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("find own %s cgroup: %w", controller, err)
	}
	return parseV1SelfDir(mi, cg, mnt, controller)
}

// parseV1SelfDir is V1SelfDir on the contents of mountinfo and
// /proc/self/cgroup, for table tests.
func parseV1SelfDir(mountinfo, selfCgroup []byte, mnt, controller string) (string, error) {
	self, ok, err := parseSelfV1(selfCgroup, controller)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("find own %s cgroup: no %s line in /proc/self/cgroup", controller, controller)
	}
	root, found := "", false
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		m, ok, err := parseMountLine(sc.Text())
		if err != nil {
			return "", err
		}
		if ok && m.fstype == "cgroup" && m.point == mnt &&
			slices.Contains(strings.Split(m.superOpts, ","), controller) {
			root, found = m.root, true
			break
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("parse mountinfo: %w", err)
	}
	if !found {
		return "", fmt.Errorf("find own %s cgroup: no %s mount at %s", controller, controller, mnt)
	}
	rel, ok := cutPathPrefix(self, root)
	if !ok {
		return "", fmt.Errorf("find own %s cgroup: %s is not under the mount's root %s", controller, self, root)
	}
	return path.Join(mnt, rel), nil
}

// parseSelfV1 returns the path of the "ID:CONTROLLERS:PATH" line of
// /proc/self/cgroup whose controller list holds controller.
func parseSelfV1(b []byte, controller string) (string, bool, error) {
	for _, line := range strings.Split(string(b), "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, p, ok := strings.Cut(rest, ":")
		if !ok || !slices.Contains(strings.Split(ctrls, ","), controller) {
			continue
		}
		p = strings.TrimSuffix(p, " (deleted)")
		if !strings.HasPrefix(p, "/") {
			return "", false, fmt.Errorf("parse /proc/self/cgroup: %s path %q is not absolute", controller, p)
		}
		return p, true, nil
	}
	return "", false, nil
}

// NewV1Tree creates the cgroup freezerParent/tfgpu-<name> (freezerParent
// must be a directory of the v1 freezer hierarchy, such as V1SelfDir(l,
// "freezer")) and, when pidsParent is not "", pidsParent/tfgpu-<name> in
// the pids hierarchy (V1SelfDir(l, "pids")); a pids cgroup that cannot be
// created is left out (it only counts). sweep are the options of the
// proc-mode sweep (NewProcTree with the supervisor's pid): pass
// WithExclude(proc.Reaper.Owns). Like the proc mode, the sweep needs the
// supervisor to be a child subreaper.
//
// If the freezer cgroup exists already it is a leftover, from a supervisor
// of the same name that died without cleaning up: its processes are killed
// and waited for (until ctx ends) and the cgroup is reused.
func NewV1Tree(ctx context.Context, freezerParent, pidsParent, name string, sweep ...ProcOption) (*V1Tree, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("create v1 cgroup: bad name %q", name)
	}
	if err := isV1(freezerParent); err != nil {
		return nil, err
	}
	t := &V1Tree{dir: filepath.Join(freezerParent, "tfgpu-"+name),
		sweep: NewProcTree(os.Getpid(), sweep...)}
	leftover := false
	if err := os.Mkdir(t.dir, 0o755); errors.Is(err, os.ErrExist) {
		leftover = true
	} else if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", t.dir, err)
	}
	if _, err := os.Stat(filepath.Join(t.dir, "freezer.state")); err != nil {
		if !leftover {
			_ = unix.Rmdir(t.dir)
		}
		return nil, fmt.Errorf("create cgroup %s: not a freezer cgroup: %w", t.dir, err)
	}
	if pidsParent != "" && isV1(pidsParent) == nil {
		d := filepath.Join(pidsParent, "tfgpu-"+name)
		if err := os.Mkdir(d, 0o755); err == nil || errors.Is(err, os.ErrExist) {
			t.pidsDir = d
		}
	}
	if leftover {
		if _, err := t.Kill(ctx); err != nil {
			return nil, fmt.Errorf("clear leftover cgroup: %w", err)
		}
	}
	return t, nil
}

// isV1 checks that dir is in a cgroup v1 file system.
func isV1(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("create cgroup under %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP_SUPER_MAGIC {
		return fmt.Errorf("create cgroup under %s: not a cgroup v1 file system", dir)
	}
	return nil
}

// Dir is the freezer cgroup's directory.
func (t *V1Tree) Dir() string { return t.dir }

// PidsDir is the pids cgroup's directory, "" when there is none.
func (t *V1Tree) PidsDir() string { return t.pidsDir }

func (t *V1Tree) Mode() string { return ModeV1 }

// Configure puts the leader in a new process group, as the proc mode does.
// v1 cannot create it inside the cgroup; Started moves it.
func (t *V1Tree) Configure(attr *syscall.SysProcAttr) error {
	if err := checkGroupAttr(attr, "v1 cgroup tree"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("configure v1 cgroup tree %s: %w", t.dir, ErrClosed)
	}
	attr.Setpgid, attr.Pgid = true, 0
	return nil
}

// Started records the leader and moves it into the freezer cgroup (and the
// pids cgroup). Children it forked before the move stay outside; the sweep
// finds them. A failed move (the leader already exited) is not reported:
// the sweep covers the leader's tree either way.
func (t *V1Tree) Started(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leader = pid
	t.sweep.Started(pid)
	if t.closed || pid <= 0 {
		return
	}
	_ = writeFile(filepath.Join(t.dir, "cgroup.procs"), strconv.Itoa(pid))
	if t.pidsDir != "" {
		_ = writeFile(filepath.Join(t.pidsDir, "cgroup.procs"), strconv.Itoa(pid))
	}
}

// Pids reads the freezer cgroup's cgroup.procs (exited processes, zombies,
// are no longer listed) and adds those the sweep finds outside it.
func (t *V1Tree) Pids() ([]int, error) {
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
	more, err := t.sweep.Pids()
	if err != nil {
		return nil, fmt.Errorf("list cgroup %s: sweep: %w", t.dir, err)
	}
	pids, _ = addOutside(pids, more)
	return pids, nil
}

// TaskCount reads pids.current of the pids cgroup: the tasks (threads) in
// it. It fails when there is no pids cgroup.
func (t *V1Tree) TaskCount() (int, error) {
	if t.pidsDir == "" {
		return 0, fmt.Errorf("count tasks of %s: no pids cgroup", t.dir)
	}
	b, err := os.ReadFile(filepath.Join(t.pidsDir, "pids.current"))
	if err != nil {
		return 0, fmt.Errorf("count tasks: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("count tasks: parse %s/pids.current: %w", t.pidsDir, err)
	}
	return n, nil
}

// Kill empties the freezer cgroup, then runs the sweep. With a pids cgroup
// (PidsDir) it fences the tree instead of freezing it (killFenced): a kill
// that is itself killed part-way (the engine's SIGKILL of the supervisor
// during a stop: podman stop, scancel) must not leave the kernel FROZEN,
// where its processes neither run nor die until someone thaws them, and in
// a container no one is left to. Without one it works in freeze rounds
// (killFrozen). Polls sleep 1 ms, growing to 20 ms. When ctx ends, the
// round in progress still signals (and thaws), then Kill reports how many
// processes are left. killed counts the processes signalled, plus those
// the sweep killed.
func (t *V1Tree) Kill(ctx context.Context) (int, error) {
	t.mu.Lock()
	closed := t.closed
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
	n, err := t.sweep.Kill(ctx)
	killed += n
	if err != nil {
		return killed, fmt.Errorf("kill cgroup %s: sweep: %w", t.dir, err)
	}
	return killed, nil
}

// freezeWait bounds one round's wait for FROZEN. A freeze that takes
// longer does not hold the kill up: the round kills and thaws anyway.
const freezeWait = 500 * time.Millisecond

func (t *V1Tree) killCgroup(ctx context.Context) (int, error) {
	if t.pidsDir != "" {
		if restore, err := t.fence(); err == nil {
			defer restore()
			if t.fenced() {
				return t.killFenced(ctx)
			}
		}
	}
	return t.killFrozen(ctx)
}

// fenced reports whether every process of the freezer cgroup is in the
// pids cgroup too, so that the fence holds them: DestroyV1 in another
// process (root's `stop`) finds the pids cgroup under its own, which need
// not be the kernel's.
func (t *V1Tree) fenced() bool {
	in, err := readProcs(t.dir)
	if err != nil {
		return false
	}
	held, err := readProcs(t.pidsDir)
	if err != nil {
		return false
	}
	for _, p := range in {
		if !slices.Contains(held, p) {
			return false
		}
	}
	return true
}

// fence sets the pids cgroup's pids.max to 0, so that no process of the
// tree can fork or clone (EAGAIN) while it is killed; the processes keep
// running, so each dies of its SIGKILL whoever sent it, and a supervisor
// that dies during the kill leaves a tree its engine's own kill empties.
// restore puts the old pids.max back for the tree's next kernel.
func (t *V1Tree) fence() (restore func(), err error) {
	file := filepath.Join(t.pidsDir, "pids.max")
	old, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if err := writeFile(file, "0"); err != nil {
		return nil, err
	}
	return func() { _ = writeFile(file, strings.TrimSpace(string(old))) }, nil
}

// killFenced SIGKILLs every process in cgroup.procs, in rounds, until it is
// empty (a process leaves it when it exits, before it is reaped): a round
// ends when cgroup.procs is empty or lists a process not yet signalled (one
// forked before the fence), which starts another. A cgroup left FROZEN by
// a supervisor that died during a freeze (an older one, or one without a
// pids cgroup) is thawed first: a frozen process does not act on SIGKILL.
func (t *V1Tree) killFenced(ctx context.Context) (int, error) {
	signalled := map[int]struct{}{}
	if err := writeFile(filepath.Join(t.dir, "freezer.state"), "THAWED"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("thaw: %w", err)
	}
	for {
		pids, err := readProcs(t.dir)
		if errors.Is(err, os.ErrNotExist) {
			return len(signalled), nil
		}
		if err != nil {
			return len(signalled), err
		}
		if len(pids) == 0 {
			return len(signalled), nil
		}
		if testKillRound != nil {
			testKillRound(t)
		}
		sigErr := killListed(pids, signalled)
		again, err := t.waitEmpty(ctx, signalled)
		if err != nil {
			return len(signalled), t.leftErr(fmt.Errorf("waiting for them to exit: %w", err), sigErr)
		}
		if !again {
			return len(signalled), nil
		}
	}
}

// killListed SIGKILLs pids, never init or the calling supervisor whatever
// the cgroup says, adds those signalled to signalled, and returns the
// first error but ESRCH (gone already).
func killListed(pids []int, signalled map[int]struct{}) error {
	var sigErr error
	self := os.Getpid()
	for _, pid := range pids {
		if pid <= 1 || pid == self {
			continue
		}
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			if sigErr == nil {
				sigErr = fmt.Errorf("signal SIGKILL to pid %d: %w", pid, err)
			}
			continue
		}
		signalled[pid] = struct{}{}
	}
	return sigErr
}

// testKillRound, when a test sets it, runs at each kill round's start,
// after the fence or the freeze: where an engine's SIGKILL of the
// supervisor would find it.
var testKillRound func(*V1Tree)

// killFrozen is Kill without a pids cgroup. Each round writes FROZEN to
// freezer.state and polls (v1 has no event file for it) until it reads
// FROZEN, so that no process of the cgroup can fork or run (for at most
// freezeWait: a freeze that has not completed by then does not stop the
// round, it only loses its guarantee to the next round); SIGKILLs every
// process in cgroup.procs; writes THAWED, so that the frozen processes run
// and die; and waits as killFenced does. A supervisor killed between the
// freeze and the thaw leaves the tree FROZEN: the next supervisor, `stop`
// or a leftover's NewV1Tree thaws it.
func (t *V1Tree) killFrozen(ctx context.Context) (int, error) {
	signalled := map[int]struct{}{}
	for {
		pids, err := readProcs(t.dir)
		if errors.Is(err, os.ErrNotExist) {
			return len(signalled), nil // removed, so empty: rmdir(2) refuses a populated cgroup
		}
		if err != nil {
			return len(signalled), err
		}
		if len(pids) == 0 {
			return len(signalled), nil
		}
		if err := writeFile(filepath.Join(t.dir, "freezer.state"), "FROZEN"); err != nil {
			return len(signalled), fmt.Errorf("freeze: %w", err)
		}
		// Even when the freeze does not complete (a task in an
		// uninterruptible sleep holds FREEZING; a loaded host makes it
		// slow): kill what is there and thaw. Within ctx another round
		// follows and catches what forked meanwhile; when ctx has ended
		// the error says so.
		fctx, cancel := context.WithTimeout(ctx, freezeWait)
		frozenErr := t.waitFrozen(fctx)
		cancel()
		if frozenErr != nil && ctx.Err() == nil {
			frozenErr = nil // not frozen in time: a round without the freeze's guarantee
		}
		if testKillRound != nil {
			testKillRound(t)
		}
		pids, err = readProcs(t.dir)
		sigErr := killListed(pids, signalled)
		if terr := writeFile(filepath.Join(t.dir, "freezer.state"), "THAWED"); terr != nil {
			return len(signalled), fmt.Errorf("thaw: %w", terr)
		}
		if err != nil {
			return len(signalled), err
		}
		if frozenErr != nil {
			return len(signalled), t.leftErr(fmt.Errorf("freezing: %w", frozenErr), sigErr)
		}
		again, err := t.waitEmpty(ctx, signalled)
		if err != nil {
			return len(signalled), t.leftErr(fmt.Errorf("waiting for them to exit: %w", err), sigErr)
		}
		if !again {
			return len(signalled), nil
		}
	}
}

// leftErr says how many processes are still in the cgroup, and the first
// few with their states (D: in the kernel, uninterruptible; T: stopped).
func (t *V1Tree) leftErr(err, sigErr error) error {
	left, _ := readProcs(t.dir)
	var some []string
	for _, pid := range left[:min(len(left), 5)] {
		state := "?"
		if p, perr := proc.Read(pid); perr == nil {
			state = string(p.State)
		}
		some = append(some, fmt.Sprintf("%d %s", pid, state))
	}
	err = fmt.Errorf("%d processes left (%s): %w", len(left), strings.Join(some, ", "), err)
	if sigErr != nil {
		err = fmt.Errorf("%w (first signal error: %w)", err, sigErr)
	}
	return err
}

// waitFrozen polls freezer.state until it reads FROZEN (it reads FREEZING
// while some task has not yet stopped).
func (t *V1Tree) waitFrozen(ctx context.Context) error {
	return pollUntil(ctx, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(t.dir, "freezer.state"))
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(b)) == "FROZEN", nil
	})
}

// waitEmpty polls cgroup.procs until it is empty (again false) or lists a
// process not in signalled (again true: it was missed, another round).
func (t *V1Tree) waitEmpty(ctx context.Context, signalled map[int]struct{}) (again bool, err error) {
	err = pollUntil(ctx, func() (bool, error) {
		pids, err := readProcs(t.dir)
		if errors.Is(err, os.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for _, p := range pids {
			if _, ok := signalled[p]; !ok {
				again = true
			}
		}
		return len(pids) == 0 || again, nil
	})
	return again, err
}

// pollUntil calls done until it returns true or an error, sleeping
// firstPause between calls, doubling up to maxPause, or until ctx ends.
func pollUntil(ctx context.Context, done func() (bool, error)) error {
	pause := firstPause
	timer := time.NewTimer(pause)
	defer timer.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		timer.Reset(pause)
		select {
		case <-timer.C:
			pause = min(2*pause, maxPause)
		case <-ctx.Done():
			if ok, err := done(); err != nil || ok {
				return err
			}
			return ctx.Err()
		}
	}
}

// Close removes the freezer cgroup's directory and the pids cgroup's,
// which fails with EBUSY while a process is in it: call Kill first. Close
// may be called again after a failure; once the directories are gone it
// returns nil.
func (t *V1Tree) Close() error {
	t.killMu.Lock() // not while a Kill is waiting
	defer t.killMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.sweep.Close()
	var errs []error
	if !t.removed {
		if err := removeCgroup(t.dir); err != nil {
			errs = append(errs, err)
		} else {
			t.removed = true
		}
	}
	if t.pidsDir != "" && !t.pidsGone {
		if err := removeCgroup(t.pidsDir); err != nil {
			errs = append(errs, err)
		} else {
			t.pidsGone = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	return nil
}

// DestroyV1 kills the processes of a freezer cgroup another supervisor
// made (dir, named tfgpu-NAME), waits until it is empty and removes it,
// with the pids cgroup of the same name: a V1Tree of that name treats it
// as a leftover and empties it. It returns how many processes were in it;
// a dir that is gone is not an error.
func DestroyV1(ctx context.Context, dir string) (int, error) {
	pids, err := Procs(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	pidsParent := ""
	if l, err := DetectLayout(); err == nil {
		pidsParent, _ = V1SelfDir(l, "pids")
	}
	t, err := NewV1Tree(ctx, filepath.Dir(dir), pidsParent, strings.TrimPrefix(filepath.Base(dir), "tfgpu-"))
	if err != nil {
		return 0, err
	}
	return len(pids), t.Close()
}

// FreezerState reads freezer.state of the v1 freezer cgroup dir: THAWED,
// FREEZING or FROZEN.
func FreezerState(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
