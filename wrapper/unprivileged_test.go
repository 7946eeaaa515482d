package wrapper

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"golang.org/x/sys/unix"
)

// nobody is the unprivileged user the supervisor runs as in these tests.
const nobody = 65534

// An ordinary user whose cgroup subtree is delegated to it (simulated by
// chowning a cgroup to nobody and starting the supervisor in it, as
// systemd's Delegate=yes does) gets v2 containment there.
func TestUnprivilegedSupervisorUsesItsDelegatedSubtree(t *testing.T) {
	parent := requireCgroupV2(t)
	deleg := filepath.Join(parent, "tfgpu-delegated-test")
	testutil.NoErr(t, os.Mkdir(deleg, 0o755))
	t.Cleanup(func() {
		// The supervisor is gone by now; its child cgroup too.
		for i := 0; i < 50 && os.Remove(deleg) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	// What delegation hands over (Documentation/admin-guide/cgroup-v2.rst,
	// "Delegation Containment"): the directory, cgroup.procs,
	// cgroup.threads and cgroup.subtree_control.
	for _, p := range []string{deleg, deleg + "/cgroup.procs", deleg + "/cgroup.threads", deleg + "/cgroup.subtree_control"} {
		testutil.NoErr(t, os.Chown(p, nobody, nobody))
	}
	fd, err := unix.Open(deleg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	testutil.NoErr(t, err)
	defer unix.Close(fd)
	h, cmd := startExternalAs(t, "", &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: nobody, Gid: nobody},
		UseCgroupFD: true, CgroupFD: fd,
	})
	if !strings.Contains(h.stderr.String(), "mode=v2") || !strings.Contains(h.stderr.String(), deleg+"/tfgpu-"+testKernelID) {
		t.Fatalf("not contained in the delegated subtree; log:\n%s", h.stderr)
	}
	pid := h.spawnEscapee()
	h.stopAndCheck(cmd, pid)
	if left, _ := filepath.Glob(filepath.Join(deleg, "tfgpu-"+testKernelID+"-*")); len(left) > 0 {
		t.Fatalf("kernel cgroup left in the delegated subtree: %v", left)
	}
}

// With nothing writable, an unprivileged supervisor falls back to the proc
// tree and says so, and still kills an escaped process.
func TestUnprivilegedSupervisorWithoutCgroupsSaysSo(t *testing.T) {
	requireCgroupV2(t) // root, so that it can run a process as nobody
	h, cmd := startExternalAs(t, "", &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}})
	log := h.stderr.String()
	if !strings.Contains(log, "mode=proc") || !strings.Contains(log, "no usable cgroup v2") {
		t.Fatalf("no fallback to the proc tree, or not said why; log:\n%s", log)
	}
	pid := h.spawnEscapee()
	h.stopAndCheck(cmd, pid)
}
