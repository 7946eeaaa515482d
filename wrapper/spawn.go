package wrapper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
)

// innerConnName is the inner connection file's name inside its directory.
const innerConnName = "kernel.json"

// parentDeathSignal is what the kernel delivers to the supervisor when the
// thread that started it exits (prctl(2) PR_SET_PDEATHSIG). That is usually
// the Jupyter server dying, but a multi-threaded launcher's thread exiting
// sends it too, so the handler checks parentGone before stopping, which is
// why it is not SIGTERM.
const parentDeathSignal = unix.SIGUSR2

var startPPID = os.Getppid()

// watchParent asks for parentDeathSignal when the parent dies. Call it after
// signal.Notify for that signal, since its default action ends the process;
// a parent that died before is caught by parentGone.
// The returned func undoes it (for tests that call Run in-process).
func watchParent() (undo func()) {
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(parentDeathSignal), 0, 0, 0)
	return func() { _ = unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0) }
}

// parentGone reports whether the process that started the supervisor has
// exited: the parent changed, or the launcher jupyter_client named in
// JPY_PARENT_PID no longer exists.
func parentGone() bool {
	if os.Getppid() != startPPID {
		return true
	}
	if v, err := strconv.Atoi(os.Getenv("JPY_PARENT_PID")); err == nil && v > 1 {
		if err := unix.Kill(v, 0); errors.Is(err, unix.ESRCH) {
			return true
		}
	}
	return false
}

// spawn starts the kernel in its own process group (and, through the tree,
// its containment), with JPY_PARENT_PID naming the supervisor and SIGKILL as
// its parent-death signal should the supervisor itself be SIGKILLed.
// On failure it returns a nil channel and the exit code.
func (s *supervisor) spawn(r *cgroup.Reaper, argv []string) (<-chan cgroup.ExitStatus, int) {
	if len(argv) == 0 {
		fmt.Fprintf(s.cfg.Stderr, "tfgpu-kernel: no kernel command given after --\n")
		return nil, ExitUsage
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(s.cfg.Stderr, "tfgpu-kernel: cannot run the kernel: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, ExitNoExec
		}
		return nil, ExitExec
	}
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.tree.Configure(sys); err != nil {
		s.log.Error("cannot prepare the kernel's containment", "err", err)
		return nil, ExitFailed
	}
	env := append(withoutEnv(withoutEnv(os.Environ(), "JPY_PARENT_PID"), treeMarkerEnv),
		"JPY_PARENT_PID="+strconv.Itoa(os.Getpid()), treeMarkerEnv+"="+s.marker)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, ExitFailed
	}
	defer devnull.Close()
	attr := &syscall.ProcAttr{Env: env, Files: []uintptr{devnull.Fd(), os.Stdout.Fd(), os.Stderr.Fd()}, Sys: sys}
	runPath, runArgv := path, argv
	scope, _ := s.tree.(*scopeTree)
	if scope != nil {
		if runPath, runArgv, attr.Files, err = scope.wrap(path, argv, attr.Files); err != nil {
			s.log.Error("cannot prepare the kernel's containment", "err", err)
			return nil, ExitFailed
		}
	}
	pid, exited, err := r.StartProcess(runPath, runArgv, attr)
	if err != nil && sys.UseCgroupFD && cloneRefused(err) {
		// clone3 with CLONE_INTO_CGROUP refused (old kernel, seccomp):
		// spawn plainly and move the kernel into the cgroup after.
		s.log.Warn("cannot start the kernel inside its cgroup; moving it there after start", "err", err)
		if err := s.retreeWithoutCloneInto(r, sys); err != nil {
			s.log.Error("cannot prepare the kernel's containment", "err", err)
			return nil, ExitFailed
		}
		pid, exited, err = r.StartProcess(path, argv, attr)
	}
	if err != nil {
		fmt.Fprintf(s.cfg.Stderr, "tfgpu-kernel: cannot run the kernel %s: %v\n", path, err)
		if errors.Is(err, unix.ENOENT) {
			return nil, ExitNoExec
		}
		return nil, ExitExec
	}
	s.kpid = pid
	if s.mem != nil {
		// Before the kernel forks anything (v1 has no clone-into): what it
		// forks later inherits the cgroup.
		if err := s.mem.Add(pid); err != nil {
			s.log.Warn("cannot put the kernel under its memory limit", "err", err)
		}
	}
	s.tree.Started(pid)
	if scope != nil {
		if err := scope.Err(); err != nil {
			return s.leaveScope(r, scope, exited, argv, err)
		}
		s.scopeMemory(scope)
	}
	return exited, 0
}

// leaveScope undoes a kernel start whose systemd scope did not come about
// (systemd-run failed): what was started is killed, and the kernel is
// started again under the v1 freezer or the proc tree.
func (s *supervisor) leaveScope(r *cgroup.Reaper, scope *scopeTree, exited <-chan cgroup.ExitStatus, argv []string, why error) (<-chan cgroup.ExitStatus, int) {
	s.log.Warn("no systemd scope for the kernel; starting it without", "err", why)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.KillTimeout)
	defer cancel()
	if _, err := scope.Kill(ctx); err != nil {
		s.log.Error("cannot kill what systemd-run left", "err", err)
		return nil, ExitFailed
	}
	select {
	case <-exited:
	case <-ctx.Done():
	}
	scope.Close()
	tree, how, err := lastResort(s.id, r, fmt.Sprintf("systemd scope failed (%v)", why))
	if err != nil {
		s.log.Error("cannot prepare the kernel's containment", "err", err)
		return nil, ExitFailed
	}
	s.tree = tree
	s.log.Info("containment", "mode", tree.Mode(), "why", how)
	if scope.memLimit > 0 {
		s.limitMemory(scope.memLimit)
	}
	s.kpid = 0
	return s.spawn(r, argv)
}

// scopeMemory watches the memory limit systemd put on the kernel's scope,
// for the out-of-memory kills it causes.
func (s *supervisor) scopeMemory(scope *scopeTree) {
	if scope.memLimit <= 0 {
		return
	}
	m, err := cgroup.NewV2Memory(scope.Dir(), scope.memLimit)
	if err != nil {
		s.log.Warn("memory limit not applied; the kernel runs without one", "limit", cgroup.FormatSize(scope.memLimit), "why", err)
		return
	}
	s.mem = m
	s.log.Info("memory limit", "limit", cgroup.FormatSize(m.Limit()), "how", "MemoryMax of systemd scope "+scope.Dir())
}

// cloneRefused reports whether a spawn failed in clone3 itself rather than
// in exec.
func cloneRefused(err error) bool {
	for _, e := range []error{unix.ENOSYS, unix.EPERM, unix.EINVAL, unix.EOPNOTSUPP, unix.E2BIG} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retreeWithoutCloneInto replaces a v2 tree by one that moves the kernel
// into the cgroup after the fork, and prepares sys for it.
func (s *supervisor) retreeWithoutCloneInto(r *cgroup.Reaper, sys *syscall.SysProcAttr) error {
	s.tree.Close()
	tree, _, err := newTree(CgroupV2, s.id, r, cgroup.WithoutCloneInto(cgroup.WithExclude(r.Owns)))
	if err != nil {
		return err
	}
	s.tree = tree
	*sys = syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return s.tree.Configure(sys)
}

// substituteConn replaces every argument naming Jupyter's connection file
// with the inner one (DESIGN §3 Start 6).
func substituteConn(argv []string, conn, inner string) []string {
	abs, _ := filepath.Abs(conn)
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == conn || (abs != "" && a == abs) {
			a = inner
		}
		out[i] = a
	}
	return out
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// maxIPCPath keeps ipc paths under sun_path's 108 bytes with room for the
// "-N" port suffix.
const maxIPCPath = 100

// writeInner creates the private directory (0700) and the inner connection
// file (0600, same key and scheme as Jupyter's, so frames pass untouched).
// Endpoints are ipc sockets in that directory, reachable only by this user;
// when the path would be too long for a unix socket, or tcp is asked for,
// they are tcp ports on 127.0.0.1.
func writeInner(ci *jmsg.ConnInfo, id, transport string) (*jmsg.ConnInfo, string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if fi, err := os.Stat(base); base == "" || err != nil || !fi.IsDir() {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "tfgpu-"+shortID(id)+"-")
	if err != nil {
		return nil, "", fmt.Errorf("create inner directory: %w", err)
	}
	inner := *ci
	inner.Extra = nil
	ip := filepath.Join(dir, "k")
	switch {
	case transport == "tcp" || (transport != "ipc" && len(ip) > maxIPCPath):
		inner.Transport, inner.IP = "tcp", "127.0.0.1"
		for i := range inner.Ports {
			p, err := freePort()
			if err != nil {
				os.RemoveAll(dir)
				return nil, "", err
			}
			inner.Ports[i] = p
		}
	default:
		inner.Transport, inner.IP = "ipc", ip
		for i := range inner.Ports {
			inner.Ports[i] = i + 1
		}
	}
	if err := jmsg.WriteFile(filepath.Join(dir, innerConnName), &inner); err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("write inner connection file: %w", err)
	}
	return &inner, dir, nil
}

// freePort asks the kernel for a free loopback port. The port is free when
// returned; ipykernel binds it a moment later (the same race jupyter_client
// accepts when it writes connection files).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
