package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// doctor reports containment and memory limits, and a kernel whose
// supervisor died, with the command that fixes it; stop then finishes it.
func TestDoctorAndStopOfAStaleKernel(t *testing.T) {
	testutil.Integration(t)
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("the cgroup findings differ for other users")
	}
	bin := buildInstallTestBinary(t)
	stateDir := testutil.PrivateDir(t)
	env := append(os.Environ(), "TFGPU_STATE_DIR="+stateDir)

	r := runInstallBin(t, env, bin, "doctor")
	for _, want := range []string{"ok containment:", "ok memory limit:", "ok kernels:"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("doctor (exit %d) lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}

	// A kernel recorded by a supervisor that is gone: a pid that has exited.
	gone := exec.Command("/bin/true")
	testutil.NoErr(t, gone.Run())
	st, _ := json.Marshal(map[string]any{"kernel_id": "dead-1", "supervisor_pid": gone.Process.Pid,
		"supervisor_start": 1, "kernel_pid": gone.Process.Pid, "containment": "proc"})
	testutil.NoErr(t, os.WriteFile(filepath.Join(stateDir, "dead-1.json"), st, 0o600))
	r = runInstallBin(t, env, bin, "doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "!! stale kernel: dead-1") ||
		!strings.Contains(r.stdout, "fix:          tfgpu-kernel stop dead-1") {
		t.Fatalf("doctor with a stale kernel: exit %d\n%s", r.code, r.stdout)
	}
	r = runInstallBin(t, env, bin, "stop", "dead")
	if r.code != 0 || !strings.Contains(r.stdout, "stopped kernel root:dead-1: supervisor gone") {
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

// doctor lists the tfgpu kernelspecs Jupyter finds with the Python and
// ipykernel each runs, and says how to fix a missing one or one whose
// supervisor binary is gone.
func TestDoctorKernelspecs(t *testing.T) {
	testutil.RequireHermetic(t)
	installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	home, data, prefix := t.TempDir(), t.TempDir(), t.TempDir()
	env := append(os.Environ(), "HOME="+home, "JUPYTER_DATA_DIR="+data, "JUPYTER_PATH=", "TFGPU_STATE_DIR="+testutil.PrivateDir(t))

	r := runInstallBin(t, env, bin, "doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "!! kernelspecs:  no tfgpu kernelspec in Jupyter's paths") ||
		!strings.Contains(r.stdout, "fix:          tfgpu-kernel install") {
		t.Fatalf("doctor without a kernelspec: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A second binary, installed into a prefix on JUPYTER_PATH, then removed.
	other := filepath.Join(t.TempDir(), "tfgpu-kernel")
	b, err := os.ReadFile(bin)
	testutil.NoErr(t, err)
	testutil.NoErr(t, os.WriteFile(other, b, 0o755))
	for _, c := range [][]string{{bin, "--name", "tfgpu"}, {other, "--name", "tfgpu-old"}} {
		if r := runInstallBin(t, env, c[0], "install", "--prefix", prefix, "--python", "/usr/bin/python3", c[1], c[2]); r.code != 0 {
			t.Fatalf("install %v: exit %d\n%s", c, r.code, r.stderr)
		}
	}
	testutil.NoErr(t, os.Remove(other))
	env = append(env, "JUPYTER_PATH="+filepath.Join(prefix, "share", "jupyter"))
	r = runInstallBin(t, env, bin, "doctor")
	ok := "ok kernelspec:   tfgpu in " + filepath.Join(prefix, "share", "jupyter", "kernels", "tfgpu") + ", Python 3."
	bad := "!! kernelspec:   tfgpu-old in " + filepath.Join(prefix, "share", "jupyter", "kernels", "tfgpu-old") +
		": its supervisor " + other + " is missing or not executable"
	if r.code != 1 || !strings.Contains(r.stdout, ok) || !strings.Contains(r.stdout, "ipykernel 6.") ||
		!strings.Contains(r.stdout, bad) || !strings.Contains(r.stdout, "fix:          tfgpu-kernel install --replace --name tfgpu-old") {
		t.Fatalf("doctor with two kernelspecs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// doctor says, in one line naming both, that a user's own kernelspec hides
// one of the same name in a later Jupyter directory (#34: root's own
// "tfgpu", written without --system, hid the one for every user): here a
// venv's sys-prefix one, the venv's python3 first on PATH.
func TestDoctorSaysWhichKernelspecHides(t *testing.T) {
	testutil.RequireHermetic(t)
	py := installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	vpy := systemSiteVenv(t, py)
	home, data := t.TempDir(), t.TempDir()
	env := append(e2eCleanEnv(), "HOME="+home, "JUPYTER_DATA_DIR="+data, "JUPYTER_PATH=", "XDG_DATA_HOME=",
		"TFGPU_STATE_DIR="+testutil.PrivateDir(t), "PATH="+filepath.Dir(vpy)+":"+os.Getenv("PATH"))
	venvSpec := filepath.Join(filepath.Dir(filepath.Dir(vpy)), "share", "jupyter", "kernels", "tfgpu")
	if r := runInstallBin(t, env, bin, "install", "--sys-prefix", "--python", vpy); r.code != 0 {
		t.Fatalf("install --sys-prefix: exit %d\n%s", r.code, r.stderr)
	}
	if r := runInstallBin(t, env, bin, "doctor"); strings.Contains(r.stdout, "hides") || !strings.Contains(r.stdout, "ok kernelspec:   tfgpu in "+venvSpec) {
		t.Errorf("doctor with the venv's kernelspec alone (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runInstallBin(t, env, bin, "install", "--user", "--python", vpy); r.code != 0 {
		t.Fatalf("install --user: exit %d\n%s", r.code, r.stderr)
	}
	r := runInstallBin(t, env, bin, "doctor")
	want := "!! kernelspec:   tfgpu in " + filepath.Join(data, "kernels", "tfgpu") + " hides " + venvSpec + " of the same name"
	if r.code != 1 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "fix:          tfgpu-kernel install --uninstall --name tfgpu removes yours") {
		t.Errorf("doctor with the user's kernelspec hiding the venv's: exit %d, want %q\n%s%s", r.code, want, r.stdout, r.stderr)
	}
}
