//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Class 5 of docs/security.md#threats: the tree is what the admin limits.
// Attack L, both variants, by a real user's own kernel.

// userSupervisor is `tfgpu-kernel run` as u, with kernel as its kernel
// command (a shell script), until the test ends.
type userSupervisor struct {
	cmd     *exec.Cmd
	logPath string // a file, not a pipe: a surviving process holding a pipe would hold Wait up
	done    chan struct{}
}

func (s *userSupervisor) logText() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// startUserSupervisor runs `tfgpu-kernel run --cgroup mode` as u, with
// state as its state directory ("": ~/state) and, when cgroupFD >= 0, in
// that cgroup, until its kernel started.
func startUserSupervisor(t *testing.T, bin string, u localUser, state string, cgroupFD int, mode, kernel string) *userSupervisor {
	t.Helper()
	return startUserRun(t, bin, u, state, cgroupFD, mode, "/bin/sh", "-c", kernel)
}

// startUserRun is startUserSupervisor with the kernel's argv as given.
func startUserRun(t *testing.T, bin string, u localUser, state string, cgroupFD int, mode string, kernel ...string) *userSupervisor {
	t.Helper()
	return startUserRunEnv(t, bin, u, state, cgroupFD, mode, nil, kernel...)
}

// startUserRunEnv is startUserRun with env added to the supervisor's.
func startUserRunEnv(t *testing.T, bin string, u localUser, state string, cgroupFD int, mode string, env []string, kernel ...string) *userSupervisor {
	t.Helper()
	conn := connFileFor(t, u)
	if state == "" {
		state = u.mkdir(t, filepath.Join(u.home, "state"), 0o700)
	}
	s := &userSupervisor{logPath: filepath.Join(t.TempDir(), "supervisor.log"), done: make(chan struct{})}
	logf, err := os.Create(s.logPath)
	testutil.NoErr(t, err)
	defer logf.Close()
	s.cmd = exec.Command(bin, append([]string{"run", "--cgroup", mode, "-f", conn, "--"}, kernel...)...)
	s.cmd.Env = userEnv(u, append([]string{"TFGPU_STATE_DIR=" + state}, env...)...)
	s.cmd.Dir = "/"
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.credential, Setpgid: true}
	if cgroupFD >= 0 {
		s.cmd.SysProcAttr.UseCgroupFD, s.cmd.SysProcAttr.CgroupFD = true, cgroupFD
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	testutil.NoErr(t, s.cmd.Start())
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.stop(t, syscall.SIGKILL) })
	for i := 0; !strings.Contains(s.logText(), "kernel started"); i++ {
		if i == 1000 {
			t.Fatalf("the supervisor did not start:\n%s", s.logText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// stop signals the supervisor and waits for it (20 s, then SIGKILL of its
// group).
func (s *userSupervisor) stop(t *testing.T, sig syscall.Signal) {
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		t.Errorf("the supervisor did not exit within 20 s of %v", sig)
	}
}

// waitPidFile reads a pid a kernel's process wrote.
func waitPidFile(t *testing.T, path string) int {
	t.Helper()
	for i := 0; i < 500; i++ {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// killLater kills pid (a test's own process left alive by a failure) at
// cleanup.
func killLater(t *testing.T, pid int) {
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
}

// L, first variant: in a delegated cgroup v2 subtree (systemd's
// Delegate=yes) a process of bob's kernel writes itself into the parent's
// cgroup.procs, out of the kernel's cgroup. Root's ps counts it in the
// kernel's tree and says it left; the supervisor's stop kills it all the
// same (it is still a descendant of the kernel).
func TestSecurityTreeLeavingItsCgroupIsKilled(t *testing.T) {
	bin := sharedBinary(t)
	bob := newLocalUser(t, "bob")
	deleg := delegateCgroup(t, bob)
	fd, err := syscall.Open(deleg, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	testutil.NoErr(t, err)
	defer syscall.Close(fd)
	shared := bob.mkdir(t, filepath.Join(sharedDir(t), "out"), 0o755)
	pidFile := filepath.Join(shared, "escapee")
	kernel := `sh -c 'echo $$ > ` + deleg + `/cgroup.procs && echo $$ > ` + pidFile + ` && exec sleep 600' & exec sleep 600`
	sup := startUserSupervisor(t, bin, bob, "", fd, "v2", kernel)
	escapee := waitPidFile(t, pidFile)
	killLater(t, escapee)
	procs, _ := os.ReadFile(filepath.Join(deleg, "cgroup.procs"))
	if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(escapee)) {
		t.Fatalf("the escapee %d is not in %s/cgroup.procs: the attack did not happen (%q)\n%s", escapee, deleg, procs, sup.logText())
	}

	env := append(os.Environ(), "TFGPU_STATE_DIR=")
	code, out := runAs(t, nil, env, time.Minute, bin, "ps", "--json")
	var rows []record.KernelStatus
	if i := strings.Index(out, "["); code != 0 || i < 0 || json.Unmarshal([]byte(out[i:]), &rows) != nil {
		t.Fatalf("root's ps --json (exit %d):\n%s", code, out)
	}
	found := false
	for _, r := range rows {
		if r.SupervisorPID == sup.cmd.Process.Pid {
			found = true
			if !slices.Contains(r.PIDs, escapee) || !slices.Equal(r.Escaped, []int{escapee}) {
				t.Errorf("root's ps: pids %v, escaped %v; want the escapee %d in both", r.PIDs, r.Escaped, escapee)
			}
		}
	}
	if !found {
		t.Fatalf("root's ps does not list bob's kernel:\n%s", out)
	}
	if _, table := runAs(t, nil, env, time.Minute, bin, "ps"); !strings.Contains(table, "(1 left its cgroup)") {
		t.Errorf("root's ps table does not flag the escapee:\n%s", table)
	}

	sup.stop(t, syscall.SIGTERM) // a clean stop, as Jupyter's shutdown ends
	for i := 0; i < 100 && alive(escapee); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(escapee) {
		t.Fatalf("the process that left the kernel's cgroup survived the kernel's stop:\n%s", sup.logText())
	}
}

// L, second variant: in proc mode (no cgroup) a worker of bob's kernel
// makes itself non-dumpable (its environment, the tree's marker, is then
// unreadable to bob's processes) and leaves the process group; the
// supervisor is SIGKILLed. Its watcher finds the worker all the same, from
// what the supervisor last told it of the tree, and kills it.
func TestSecurityHiddenWorkerDiesWithItsKernel(t *testing.T) {
	bin := sharedBinary(t)
	bob := newLocalUser(t, "bob")
	shared := bob.mkdir(t, filepath.Join(sharedDir(t), "out"), 0o755)
	pidFile := filepath.Join(shared, "worker")
	worker := `import ctypes, os, sys, time
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
os.setsid()
with open(sys.argv[1], "w") as f:
    f.write("%d\n" % os.getpid())
time.sleep(600)
`
	script := bob.own(t, filepath.Join(shared, "worker.py"), []byte(worker), 0o644)
	kernel := `/usr/bin/python3 ` + script + ` ` + pidFile + ` & exec sleep 600`
	// At debug the supervisor logs each tree it tells its watcher: the
	// shell (then sleep) and the worker it forked are 2 processes, pids
	// and start times that setsid and prctl do not change.
	sup := startUserRunEnv(t, bin, bob, "", -1, "proc", []string{"TFGPU_LOG_LEVEL=debug"}, "/bin/sh", "-c", kernel)
	w := waitPidFile(t, pidFile)
	killLater(t, w)
	if code, out := runAs(t, bob.credential, nil, 10*time.Second, "/bin/cat", "/proc/"+strconv.Itoa(w)+"/environ"); code == 0 {
		t.Fatalf("bob can read the worker's environment: the attack did not happen (%q)", out)
	}
	testutil.WaitFor(t, 20*time.Second, "the supervisor to tell its watcher a tree with the worker", func() bool {
		for _, line := range strings.Split(sup.logText(), "\n") {
			if strings.Contains(line, `msg="told the watcher the tree"`) && strings.Contains(line, " processes=2") {
				return true
			}
		}
		return false
	})
	sup.stop(t, syscall.SIGKILL)
	for i := 0; i < 250 && alive(w); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(w) {
		t.Fatalf("the non-dumpable worker survived its SIGKILLed supervisor's watcher:\n%s", sup.logText())
	}
}
