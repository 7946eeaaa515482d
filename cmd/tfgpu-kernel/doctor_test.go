package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// doctor reports containment and memory limits, and a kernel whose
// supervisor died, with the command that fixes it; stop then finishes it.
func TestDoctorAndStopOfAStaleKernel(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("the cgroup findings differ for other users")
	}
	bin := buildInstallTestBinary(t)
	stateDir := t.TempDir()
	env := append(os.Environ(), "TFGPU_STATE_DIR="+stateDir)

	r := runInstallBin(t, env, bin, "doctor")
	for _, want := range []string{"ok containment:", "ok memory limit:", "ok kernels:"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("doctor (exit %d) lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}

	// A kernel recorded by a supervisor that is gone: a pid that has exited.
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(map[string]any{"kernel_id": "dead-1", "supervisor_pid": gone.Process.Pid,
		"supervisor_start": 1, "kernel_pid": gone.Process.Pid, "containment": "proc"})
	if err := os.WriteFile(filepath.Join(stateDir, "dead-1.json"), st, 0o600); err != nil {
		t.Fatal(err)
	}
	r = runInstallBin(t, env, bin, "doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "!! stale kernel: dead-1") ||
		!strings.Contains(r.stdout, "fix:          tfgpu-kernel stop dead-1") {
		t.Fatalf("doctor with a stale kernel: exit %d\n%s", r.code, r.stdout)
	}
	r = runInstallBin(t, env, bin, "stop", "dead")
	if r.code != 0 || !strings.Contains(r.stdout, "stopped kernel dead-1: supervisor gone") {
		t.Fatalf("stop: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "dead-1.json")); !os.IsNotExist(err) {
		t.Fatalf("state file left after stop: %v", err)
	}
	r = runInstallBin(t, env, bin, "stop", "nope")
	if r.code != 2 || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("stop of an unknown kernel: exit %d, stderr %q", r.code, r.stderr)
	}
}
