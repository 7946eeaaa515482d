package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/doctor"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// installJupyterPython is Debian's /usr/bin/python3 with jupyter_client; without it
// the test fails in CI (CI=true) and is skipped elsewhere.
func installJupyterPython(t *testing.T) string {
	t.Helper()
	testutil.Integration(t)
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import ipykernel, jupyter_client, jupyter_core").CombinedOutput(); err != nil {
		msg := "need " + py + " with ipykernel and jupyter_client (apt-get install python3-ipykernel python3-jupyter-client): " + strings.TrimSpace(string(out))
		testutil.RequireOrSkip(t, "%s", msg)
	}
	return py
}

// testBinary is the command, built once per test binary (testBinaryDir
// is removed by TestMain).
var (
	testBinaryOnce sync.Once
	testBinaryDir  string
	testBinaryPath string
	testBinaryErr  error
)

// buildInstallTestBinary builds the command as install.sh does (once per
// test binary) and returns its path. Tests only run it; one that changes
// or moves a binary copies it first.
func buildInstallTestBinary(t *testing.T) string {
	t.Helper()
	testutil.Integration(t)
	testBinaryOnce.Do(func() {
		if testBinaryDir, testBinaryErr = os.MkdirTemp("", "tfgpu-test-bin-"); testBinaryErr != nil {
			return
		}
		testBinaryPath = filepath.Join(testBinaryDir, "tfgpu-kernel")
		cmd := exec.Command("go", "build", "-ldflags=-extldflags=-Wl,-z,lazy", "-o", testBinaryPath, ".") // as install.sh
		if out, err := cmd.CombinedOutput(); err != nil {
			testBinaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if testBinaryErr != nil {
		t.Fatal(testBinaryErr)
	}
	return testBinaryPath
}

type installRunResult struct {
	code           int
	stdout, stderr string
}

func runInstallBin(t *testing.T, env []string, bin string, args ...string) installRunResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	err := cmd.Run()
	r := installRunResult{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	return r
}

// TestInstallRealJupyter installs with the built binary into a prefix and
// has the real jupyter_client find and load the kernelspec. It runs
// `jupyter kernelspec` as `-m jupyter_client.kernelspecapp`: Debian ships the
// jupyter-kernelspec script in the separate jupyter-client package.
func TestInstallRealJupyter(t *testing.T) {
	py := installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	prefix, home := t.TempDir(), t.TempDir()
	env := append(os.Environ(), "HOME="+home, "JUPYTER_DATA_DIR="+filepath.Join(home, "jd"),
		"XDG_DATA_HOME=", "JUPYTER_PATH="+filepath.Join(prefix, "share/jupyter"), "JUPYTER_CONFIG_DIR="+home)
	dir := filepath.Join(prefix, "share/jupyter/kernels/tfgpu")

	r := runInstallBin(t, env, bin, "install", "--prefix", prefix, "--python", py, "--env", "CUDA_VISIBLE_DEVICES=0",
		"--memory-limit", "8G")
	if r.code != 0 || !strings.Contains(r.stdout, dir) || !strings.Contains(r.stdout, py) || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("install: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	var list struct {
		Kernelspecs map[string]struct {
			ResourceDir string `json:"resource_dir"`
			Spec        struct {
				Argv          []string          `json:"argv"`
				DisplayName   string            `json:"display_name"`
				InterruptMode string            `json:"interrupt_mode"`
				Env           map[string]string `json:"env"`
				Metadata      map[string]any    `json:"metadata"`
			} `json:"spec"`
		} `json:"kernelspecs"`
	}
	out := installPyOut(t, env, py, "-m", "jupyter_client.kernelspecapp", "list", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("jupyter kernelspec list --json: %v\n%s", err, out)
	}
	ks, ok := list.Kernelspecs["tfgpu"]
	if !ok {
		t.Fatalf("jupyter kernelspec list does not show tfgpu:\n%s", out)
	}
	realBin, _ := filepath.EvalSymlinks(bin)
	s := ks.Spec
	switch {
	case ks.ResourceDir != dir:
		t.Errorf("resource_dir = %s, want %s", ks.ResourceDir, dir)
	case s.DisplayName != "TF-GPU (clean restart)":
		t.Errorf("display_name = %q", s.DisplayName)
	case len(s.Argv) < 10 || s.Argv[0] != realBin || s.Argv[1] != "run" || !installArgvHas(s.Argv, py):
		t.Errorf("argv = %q, want %s run … %s", s.Argv, realBin, py)
	case s.Argv[2] != "--memory-limit" || s.Argv[3] != "8G":
		t.Errorf("argv = %q, want run --memory-limit 8G", s.Argv)
	case s.InterruptMode != "signal":
		t.Errorf("interrupt_mode = %q", s.InterruptMode)
	case s.Env["TF_FORCE_GPU_ALLOW_GROWTH"] != "true" || s.Env["CUDA_VISIBLE_DEVICES"] != "0":
		t.Errorf("env = %v", s.Env)
	case s.Metadata["debugger"] != true || s.Metadata["tfgpu"] == nil:
		t.Errorf("metadata = %v", s.Metadata)
	}

	got := installPyOut(t, env, py, "-c", `import json
from jupyter_client.kernelspec import KernelSpecManager
s = KernelSpecManager().get_kernel_spec("tfgpu")
print(json.dumps({"dir": s.resource_dir, "name": s.display_name, "mode": s.interrupt_mode, "argv0": s.argv[0]}))`)
	want, _ := json.Marshal(map[string]string{"argv0": realBin, "dir": dir, "mode": "signal", "name": "TF-GPU (clean restart)"})
	var g, w map[string]string
	_ = json.Unmarshal([]byte(got), &g)
	_ = json.Unmarshal(want, &w)
	if len(g) != 4 || g["dir"] != w["dir"] || g["name"] != w["name"] || g["mode"] != w["mode"] || g["argv0"] != w["argv0"] {
		t.Errorf("KernelSpecManager.get_kernel_spec = %s, want %s", got, want)
	}

	// Second install: refused without --replace, fine with it.
	r = runInstallBin(t, env, bin, "install", "--prefix", prefix, "--python", py)
	if r.code != 1 || !strings.Contains(r.stderr, "--replace") || !isInstallErrLine(r.stderr, "tfgpu-kernel install: ") {
		t.Errorf("install over existing: exit %d, stderr %q", r.code, r.stderr)
	}
	if r = runInstallBin(t, env, bin, "install", "--prefix", prefix, "--python", py, "--replace"); r.code != 0 {
		t.Errorf("install --replace: exit %d, stderr %q", r.code, r.stderr)
	}
	if r = runInstallBin(t, env, bin, "install", "--uninstall", "--prefix", prefix); r.code != 0 {
		t.Fatalf("uninstall: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := installPyOut(t, env, py, "-m", "jupyter_client.kernelspecapp", "list", "--json"); strings.Contains(out, `"tfgpu"`) {
		t.Errorf("tfgpu still listed after uninstall:\n%s", out)
	}
	if r = runInstallBin(t, env, bin, "install", "--uninstall", "--prefix", prefix); r.code != 1 || !isInstallErrLine(r.stderr, "tfgpu-kernel install: ") {
		t.Errorf("second uninstall: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestInstallFlags checks usage errors (exit 2, one line) and --help.
func TestInstallFlags(t *testing.T) {
	bin := buildInstallTestBinary(t)
	env := append(os.Environ(), "HOME="+t.TempDir(), "JUPYTER_DATA_DIR=", "XDG_DATA_HOME=")
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"unknown flag", []string{"--bogus"}, 2},
		{"two destinations", []string{"--user", "--prefix", "/tmp/x"}, 2},
		{"empty prefix", []string{"--prefix", ""}, 2},
		{"env without =", []string{"--env", "FOO"}, 2},
		{"bad name", []string{"--name", "a b", "--prefix", t.TempDir()}, 2},
		{"positional", []string{"extra"}, 2},
		{"bad memory limit", []string{"--memory-limit", "lots", "--prefix", t.TempDir()}, 2},
		{"bad run flag", []string{"--cgroup", "v3", "--prefix", t.TempDir()}, 2},
		{"bad preload", []string{"--preload", "numpy,1torch", "--prefix", t.TempDir()}, 2},
		{"empty wrap", []string{"--wrap", "", "--prefix", t.TempDir()}, 2},
		{"wrap of a directory without kernel.json", []string{"--wrap", t.TempDir(), "--prefix", t.TempDir()}, 2},
		{"missing python", []string{"--python", "/nonexistent/python3", "--prefix", t.TempDir()}, 1},
		{"with-wraps without uninstall", []string{"--with-wraps", "--prefix", t.TempDir()}, 2},
		{"with-wraps and wrap", []string{"--uninstall", "--with-wraps", "--wrap", "python3", "--prefix", t.TempDir()}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runInstallBin(t, env, bin, append([]string{"install"}, tc.args...)...)
			if r.code != tc.code || !isInstallErrLine(r.stderr, "tfgpu-kernel install: ") || r.stdout != "" {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q", r.code, tc.code, r.stdout, r.stderr)
			}
		})
	}
	r := runInstallBin(t, env, bin, "install", "--help")
	for _, want := range []string{"Examples:", "--replace", "--wrap KERNELSPEC", "tfgpu-kernel install --wrap condaenv",
		"install --uninstall --wrap", "--with-wraps", "run flags", "--confirm-timeout", "--cgroup", "--log-level", "--shutdown-grace",
		"--kill-timeout", "--inner-transport", "--nvml-library", "--memory-limit", "--max-message-size"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("--help: exit %d, stdout lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
}

// The spare's flags go into the kernelspec as run takes them (a boolean
// as --flag=value: "--spare false" would end run's flags), and doctor
// reads them back.
func TestInstallSpareFlags(t *testing.T) {
	bin := buildInstallTestBinary(t)
	env := append(os.Environ(), "HOME="+t.TempDir(), "JUPYTER_DATA_DIR=", "XDG_DATA_HOME=")
	for _, tc := range []struct {
		args []string
		want []string
		says string
	}{
		{[]string{"--preload", "numpy,json.tool"}, []string{"--preload", "numpy,json.tool"}, "spare kernel on, preloading numpy,json.tool"},
		{[]string{"--no-spare"}, []string{"--no-spare=true"}, "no spare kernel (--no-spare=true)"},
		{[]string{"--spare=false"}, []string{"--spare=false"}, "no spare kernel (--spare=false)"},
		{nil, nil, "spare kernel on"},
	} {
		prefix := t.TempDir()
		r := runInstallBin(t, env, bin, append([]string{"install", "--prefix", prefix, "--python", "/usr/bin/python3"}, tc.args...)...)
		if r.code != 0 {
			t.Fatalf("install %v: exit %d: %s", tc.args, r.code, r.stderr)
		}
		b, err := os.ReadFile(filepath.Join(prefix, "share", "jupyter", "kernels", "tfgpu", "kernel.json"))
		testutil.NoErr(t, err)
		var spec struct{ Argv []string }
		testutil.NoErr(t, json.Unmarshal(b, &spec))
		joined := strings.Join(spec.Argv, " ")
		if len(tc.want) > 0 && !strings.Contains(joined, strings.Join(tc.want, " ")+" ") {
			t.Errorf("install %v: argv %q lacks %q", tc.args, joined, tc.want)
		}
		if got := doctor.SpareSetting(spec.Argv); got != tc.says {
			t.Errorf("install %v: doctor says %q, want %q", tc.args, got, tc.says)
		}
	}
	// run refuses a preload list it could not import, in one line naming it.
	r := runInstallBin(t, env, bin, "run", "--preload", "numpy;rm", "-f", "x.json", "--", "python3")
	if r.code != 2 || !strings.Contains(r.stderr, `--preload "numpy;rm"`) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("run --preload numpy;rm: exit %d, stderr %q", r.code, r.stderr)
	}
}

func installPyOut(t *testing.T, env []string, py string, args ...string) string {
	t.Helper()
	cmd := exec.Command(py, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", py, args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func isInstallErrLine(s, prefix string) bool {
	return strings.HasPrefix(s, prefix) && strings.Count(s, "\n") == 1 && strings.HasSuffix(s, "\n")
}

func installArgvHas(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
