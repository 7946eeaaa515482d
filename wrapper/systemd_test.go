package wrapper

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil/fakesystemd"
)

// This host runs no systemd, so the "systemd" mode is tested against
// fakesystemd's simulation of the user manager and systemd-run (its package
// doc says how faithful). The supervisor runs as nobody in the fake's
// root-owned session-1.scope, so it can make no cgroup of its own: exactly
// the desktop user's situation.

// startFakeUserManager is fakesystemd's manager of uid, its slices under
// this host's writable cgroup2 tree.
func startFakeUserManager(t *testing.T, uid int) *fakesystemd.Manager {
	t.Helper()
	return fakesystemd.Start(t, requireCgroupV2(t), uid)
}

// startInSession starts the supervisor as nobody in the session scope, with
// the fake systemd-run first on PATH and the user manager's runtime
// directory, and returns it with the kernel's pid.
func startInSession(t *testing.T, m *fakesystemd.Manager, env ...string) (*harness, *exec.Cmd) {
	t.Helper()
	h := newHarness(t, "")
	exe := copyForUser(t, os.Args[0], nobody, h)
	bin := fakesystemd.Bin(t, filepath.Dir(exe), exe)
	fd, err := unix.Open(m.Session, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	testutil.NoErr(t, err)
	defer unix.Close(fd)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Dir = filepath.Dir(exe) // userCwd
	cmd.Env = append(os.Environ(), "TFGPU_TEST_SUPERVISOR="+h.path, "TFGPU_CGROUP=auto",
		"XDG_RUNTIME_DIR="+m.Runtime, "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = h.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: nobody, Gid: nobody},
		UseCgroupFD: true, CgroupFD: fd,
	}
	testutil.NoErr(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		h.closeClients()
	})
	h.connect()
	return h, cmd
}

// A desktop user whose own cgroup is not writable gets a delegated scope
// from the systemd user manager; the scope is the kernel's tree, and stop
// kills all of it, escapees included, and leaves no cgroup behind.
func TestSystemdScopeForUserWithoutWritableCgroup(t *testing.T) {
	m := startFakeUserManager(t, nobody)
	h, cmd := startInSession(t, m, "TFGPU_MEMORY_LIMIT=300M")
	log := h.stderr.String()
	if !strings.Contains(log, "mode=systemd") || !strings.Contains(log, "own cgroup not usable") {
		t.Fatalf("not in a systemd scope, or not said why; log:\n%s", log)
	}
	t.Logf("supervisor log:\n%s", log)
	reqs := m.Asked()
	if len(reqs) != 1 {
		t.Fatalf("scopes asked for: %+v", reqs)
	}
	props := strings.Join(reqs[0].Props, " ")
	if !strings.Contains(props, "Delegate=yes") || !strings.Contains(props, "MemoryMax=314572800") {
		t.Fatalf("scope properties %q: want Delegate=yes and MemoryMax of 300M", props)
	}
	scope := filepath.Join(m.Apps, reqs[0].Unit)
	kernelPID := reqs[0].PID
	if got := procCgroup(t, kernelPID); !strings.HasSuffix(scope, got) {
		t.Fatalf("kernel %d is in %s, not in the scope %s", kernelPID, got, scope)
	}
	pid := h.spawnEscapee()
	if got := procCgroup(t, pid); !strings.HasSuffix(scope, got) {
		t.Fatalf("escapee %d is in %s, not in the scope %s", pid, got, scope)
	}
	h.stopAndCheck(cmd, pid)
	if pidAlive(kernelPID) {
		t.Fatalf("kernel %d survived", kernelPID)
	}
	if _, err := os.Stat(scope); !os.IsNotExist(err) {
		t.Fatalf("scope cgroup %s left behind: %v", scope, err)
	}
}

// When the user manager refuses the scope, the kernel starts anyway (here
// under the proc tree, nothing else being writable for nobody), the log
// says why, and the tree is still killed on stop.
func TestSystemdScopeRefusedFallsBack(t *testing.T) {
	m := startFakeUserManager(t, nobody)
	m.Refuse("Unit tfgpu.scope was already loaded or has a fragment file.")
	h, cmd := startInSession(t, m)
	log := h.stderr.String()
	if !strings.Contains(log, "no systemd scope for the kernel") || !strings.Contains(log, "mode=proc") ||
		!strings.Contains(log, "already loaded") {
		t.Fatalf("no fallback from the refused scope, or not said why; log:\n%s", log)
	}
	pid := h.spawnEscapee()
	h.stopAndCheck(cmd, pid)
}

// procCgroup is pid's cgroup2 path, relative to the cgroup2 mount.
func procCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	testutil.NoErr(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	t.Fatalf("pid %d has no cgroup2 line in %q", pid, b)
	return ""
}

// A supervisor in the systemd scope mode that is SIGKILLed: its watcher
// kills the scope's tree and removes the scope's cgroup at once, as in the
// other modes (the user is nobody, as above).
func TestSystemdScopeWatcherFinishesAKilledSupervisor(t *testing.T) {
	m := startFakeUserManager(t, nobody)
	h, cmd := startInSession(t, m)
	reqs := m.Asked()
	if len(reqs) != 1 {
		t.Fatalf("scopes asked for: %+v", reqs)
	}
	scope := filepath.Join(m.Apps, reqs[0].Unit)
	pid := h.spawnEscapee()
	took := h.killSupervisor(cmd, pid)
	if _, err := os.Stat(scope); !os.IsNotExist(err) {
		t.Fatalf("scope cgroup %s left behind: %v", scope, err)
	}
	t.Logf("tree dead and scope removed %v after the SIGKILL", took.Round(time.Millisecond))
}
