//go:build linux

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// doctorIn runs `tfgpu-kernel doctor` as cred (nil: root) in the cgroup
// cgroupFD names, in "/"; it returns the exit code and the output.
func doctorIn(t *testing.T, bin string, cred *syscall.Credential, cgroupFD int, env []string) (int, string) {
	t.Helper()
	sys := &syscall.SysProcAttr{Credential: cred, Setpgid: true, UseCgroupFD: true, CgroupFD: cgroupFD}
	return runWith(t, sys, "/", env, 2*time.Minute, bin, "doctor")
}

// Issue 23: alice's live kernel has its cgroup beside bob's (a cgroup v2
// subtree delegated to alice, where bob's doctor runs too). bob's doctor
// cannot list alice's supervisors, so it used to call her cgroup stale,
// advise `stop --all` (which stops bob's own kernel and not hers) and
// count it as a problem. Now it says, once, that it is not bob's to judge,
// and still judges a stale cgroup of bob's own; root's doctor, which lists
// every user's kernels, knows alice's. And bob's supervisor, which finds
// no cgroup it may use, says so in one short log line, the reasons being
// doctor's.
func TestDoctorLeavesOtherUsersKernelsAlone(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	deleg := delegateCgroup(t, alice)
	fd, err := syscall.Open(deleg, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	testutil.NoErr(t, err)
	defer syscall.Close(fd)
	// A cgroup of bob's own that no supervisor records.
	bobsStale := bob.mkdir(t, filepath.Join(deleg, "tfgpu-5b2c1e7a-bbbb-4bbb-8ccc-000000000002-1"), 0o755)
	t.Cleanup(func() { os.Remove(bobsStale) })

	alices := startUserSupervisor(t, bin, alice, "", fd, "v2", "exec sleep 600")
	t.Cleanup(func() { alices.stop(t, syscall.SIGTERM) }) // before the SIGKILL: her cgroup goes with her
	aliceCg := filepath.Join(deleg, "tfgpu-5b2c1e7a-aaaa-4bbb-8ccc-000000000001-"+strconv.Itoa(alices.cmd.Process.Pid))
	if _, err := os.Stat(aliceCg); err != nil {
		t.Fatalf("alice's kernel has no cgroup %s: %v\n%s", aliceCg, err, alices.logText())
	}
	bobsState := bob.mkdir(t, filepath.Join(bob.home, "state"), 0o700)
	bobs := startUserSupervisor(t, bin, bob, bobsState, -1, "auto", "exec sleep 600")

	// bob's supervisor: one short line for its containment, whatever the
	// reasons (a non-root user's ran to 400 characters).
	line := regexp.MustCompile(`(?m)^.*msg=containment .*$`).FindString(bobs.logText())
	if line == "" || len(line) > 130 {
		t.Errorf("bob's supervisor logs its containment in %d characters, want one line of at most 130 (\"kernel started\" is as long):\n%s",
			len(line), bobs.logText())
	}

	code, out := doctorIn(t, bin, bob.credential, fd, userEnv(bob, "TFGPU_STATE_DIR="+bobsState))
	t.Logf("bob's doctor (exit %d):\n%s", code, out)
	if strings.Contains(out, aliceCg) || strings.Contains(out, "stop --all") {
		t.Errorf("bob's doctor judges alice's live kernel cgroup %s, or advises stop --all", aliceCg)
	}
	for _, want := range []string{
		"ok kernels:      1 supervised kernel(s) running",
		" kernel cgroup(s) of other users: not yours to judge; root's doctor checks them", // alice's, and any other user's beside
		"!! stale cgroup: " + bobsStale + " (no supervisor records it)",
		"fix:          rmdir " + bobsStale,
		"no usable cgroup v2 (", // the reasons the log line leaves out
	} {
		if !strings.Contains(out, want) {
			t.Errorf("bob's doctor lacks %q", want)
		}
	}

	code, out = doctorIn(t, bin, nil, fd, append(os.Environ(), "TFGPU_STATE_DIR="))
	t.Logf("root's doctor (exit %d):\n%s", code, out)
	if strings.Contains(out, aliceCg) || strings.Contains(out, "of other users") ||
		!strings.Contains(out, "!! stale cgroup: "+bobsStale) {
		t.Errorf("root's doctor calls alice's live kernel cgroup stale, or leaves a cgroup unjudged, or misses bob's stale one")
	}
	m := regexp.MustCompile(`ok kernels:\s+(\d+) supervised kernel\(s\) running, .*every user's`).FindStringSubmatch(out)
	if n, _ := strconv.Atoi(append(m, "", "")[1]); n < 2 { // alice's and bob's, and whatever else runs on the host
		t.Errorf("root's doctor does not count every user's running kernels")
	}
	if !alive(alices.cmd.Process.Pid) || !alive(bobs.cmd.Process.Pid) {
		t.Error("a doctor stopped a supervisor")
	}
}
