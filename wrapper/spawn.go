package wrapper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// spawn starts the kernel in its own process group (and, through the tree,
// its containment), with JPY_PARENT_PID naming the supervisor and SIGKILL as
// its parent-death signal should the supervisor itself be SIGKILLed.
// On failure it returns a nil channel and the exit code.
func (s *supervisor) spawn(argv []string) (<-chan proc.ExitStatus, int) {
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
	env := s.kernelEnv()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, ExitFailed
	}
	defer devnull.Close()
	attr := &syscall.ProcAttr{Env: env, Files: []uintptr{devnull.Fd(), os.Stdout.Fd(), os.Stderr.Fd()}, Sys: sys}
	runPath, runArgv := path, argv
	launcher, _ := s.tree.(cgroup.Launcher)
	if launcher != nil {
		if runPath, runArgv, attr.Files, err = launcher.Launch(path, argv, attr.Files); err != nil {
			s.log.Error("cannot prepare the kernel's containment", "err", err)
			return nil, ExitFailed
		}
	}
	s.outerMem.Baseline() // the OOM kills of the engine's limit from here on are this kernel's
	pid, exited, err := s.reaper.StartProcess(runPath, runArgv, attr)
	if err != nil && sys.UseCgroupFD && cloneRefused(err) {
		// clone3 with CLONE_INTO_CGROUP refused (old kernel, seccomp):
		// spawn plainly and move the kernel into the cgroup after.
		s.log.Warn("cannot start the kernel inside its cgroup; moving it there after start", "err", err)
		if err := s.retreeWithoutCloneInto(sys); err != nil {
			s.log.Error("cannot prepare the kernel's containment", "err", err)
			return nil, ExitFailed
		}
		pid, exited, err = s.reaper.StartProcess(path, argv, attr)
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
	if launcher != nil {
		if err := launcher.Err(); err != nil {
			return s.relaunch(launcher, exited, argv, err)
		}
		s.launcherMemory(launcher)
	}
	return exited, 0
}

// kernelEnv is the kernel's environment: the supervisor's, with
// JPY_PARENT_PID naming the supervisor, the tree's marker, and the GPUs
// --gpus auto chose (placedEnv; a spare gets them at adoption).
func (s *supervisor) kernelEnv() []string {
	return append(append(withoutEnv(withoutEnv(os.Environ(), "JPY_PARENT_PID"), proc.MarkerEnv),
		"JPY_PARENT_PID="+strconv.Itoa(os.Getpid()), proc.MarkerEnv+"="+s.marker), s.placedEnv()...)
}

// relaunch undoes a kernel start whose launcher (the systemd scope) did
// not contain it (systemd-run failed): what was started is killed, and the
// kernel is started again under the v1 freezer or the proc tree.
func (s *supervisor) relaunch(launcher cgroup.Launcher, exited <-chan proc.ExitStatus, argv []string, why error) (<-chan proc.ExitStatus, int) {
	s.log.Warn("no systemd scope for the kernel; starting it without", "err", why)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.KillTimeout)
	defer cancel()
	if _, err := launcher.Kill(ctx); err != nil {
		s.log.Error("cannot kill what systemd-run left", "err", err)
		return nil, ExitFailed
	}
	select {
	case <-exited:
	case <-ctx.Done():
	}
	launcher.Close()
	opened, err := cgroup.Fallback(cgroupName(s.id), s.reaper, fmt.Sprintf("systemd scope failed (%v)", why))
	if err != nil {
		s.log.Error("cannot prepare the kernel's containment", "err", err)
		return nil, ExitFailed
	}
	s.tree, s.mode = opened.Tree, opened.Tree.Mode()
	s.log.Info("containment", "mode", s.tree.Mode(), "why", opened.Why)
	if s.cfg.MemoryLimit > 0 {
		s.limitMemory(s.cfg.MemoryLimit)
	}
	s.kpid = 0
	return s.spawn(argv)
}

// launcherMemory watches the memory limit the launcher (systemd) put on
// the kernel's scope, for the out-of-memory kills it causes.
func (s *supervisor) launcherMemory(launcher cgroup.Launcher) {
	m, err := launcher.Memory()
	switch {
	case err != nil:
		s.log.Warn("memory limit not applied; the kernel runs without one", "limit", bytesize.Format(s.cfg.MemoryLimit), "why", err)
	case m != nil:
		s.mem = m
		s.log.Info("memory limit", "limit", bytesize.Format(m.Limit()), "how", "MemoryMax of systemd scope "+launcher.Dir())
	}
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
func (s *supervisor) retreeWithoutCloneInto(sys *syscall.SysProcAttr) error {
	s.tree.Close()
	opened, err := cgroup.Open(cgroup.ModeV2, cgroupName(s.id),
		cgroup.Options{V2: []cgroup.V2Option{cgroup.WithoutCloneInto(cgroup.WithExclude(s.reaper.Owns))}})
	if err != nil {
		return err
	}
	s.tree = opened.Tree
	*sys = syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return s.tree.Configure(sys)
}
