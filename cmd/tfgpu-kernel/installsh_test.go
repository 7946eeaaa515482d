//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallScript runs install.sh as CI does (no stdin) against a temp
// --prefix and a temp JUPYTER_DATA_DIR, with HOME a temp dir too, so the
// real system is not touched: install, then --uninstall twice (idempotent).
// It needs the Go toolchain this test runs with and Debian's Jupyter stack
// (--no-deps: it never runs apt-get).
func TestInstallScript(t *testing.T) {
	py := installJupyterPython(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "install.sh"))
	if err != nil {
		t.Fatal(err)
	}
	env, tmp := installEnv(t)
	data := filepath.Join(tmp, "data")
	env = append(env, "JUPYTER_DATA_DIR="+data)
	// The temp HOME must not hide the Go setup: same caches, same go env file.
	for _, k := range []string{"GOENV", "GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(script, args...) // stdin: /dev/null, as under CI
		cmd.Dir = tmp
		var stdout, stderr bytes.Buffer
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("install.sh %q: %v", args, err)
		}
		return code, stdout.String(), stderr.String()
	}
	// Every line install.sh says itself starts "install.sh: ".
	ownLines := func(s string) bool {
		for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
			if !strings.HasPrefix(l, "install.sh: ") {
				return false
			}
		}
		return s != ""
	}

	if code, out, _ := run("--help"); code != 0 || !strings.Contains(out, "--uninstall") || !strings.Contains(out, "--python PATH") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
	if code, out, errOut := run("--bogus"); code != 2 || out != "" || !isInstallErrLine(errOut, "install.sh: unknown argument '--bogus'") {
		t.Errorf("--bogus: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	prefix := filepath.Join(tmp, "p")
	bin := filepath.Join(prefix, "bin", "tfgpu-kernel")
	spec := filepath.Join(data, "kernels", "tfgpu")
	code, out, errOut := run("--prefix", prefix, "--python", py, "--no-deps")
	if code != 0 || !strings.Contains(out, "install.sh --uninstall --prefix "+prefix) {
		t.Fatalf("install.sh: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var s struct{ Argv []string }
	if err := json.Unmarshal(readInstallFile(t, filepath.Join(spec, "kernel.json")), &s); err != nil || len(s.Argv) == 0 || s.Argv[0] != bin {
		t.Fatalf("kernelspec argv = %q, %v; want %s first", s.Argv, err, bin)
	}

	code, out, errOut = run("--uninstall", "--prefix", prefix)
	if code != 0 || !ownLines(out) || errOut != "" || !strings.Contains(out, "removed kernelspec") || !strings.Contains(out, "removed "+bin) {
		t.Errorf("--uninstall: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, p := range []string{bin, spec} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after --uninstall: %v", p, err)
		}
	}
	code, out, errOut = run("--uninstall", "--prefix="+prefix)
	if code != 0 || !ownLines(out) || strings.Count(out, "\n") != 1 || errOut != "" {
		t.Errorf("second --uninstall: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// A user whose Jupyter lives in a venv (the current stack's): --python
	// that venv's python, and that Jupyter's `kernelspec list` shows the
	// kernelspec, running the venv's Python.
	vpy := stackPython(t, stackCurrent)
	code, out, errOut = run("--prefix", prefix, "--python", vpy, "--no-deps")
	if code != 0 {
		t.Fatalf("install.sh --python %s: exit %d\nstdout:\n%s\nstderr:\n%s", vpy, code, out, errOut)
	}
	list := exec.Command(filepath.Join(filepath.Dir(vpy), "jupyter"), "kernelspec", "list", "--json")
	list.Env = env
	b, err := list.Output()
	var specs struct {
		Kernelspecs map[string]struct {
			ResourceDir string `json:"resource_dir"`
			Spec        struct{ Argv []string }
		}
	}
	if err != nil || json.Unmarshal(b, &specs) != nil {
		t.Fatalf("the venv's jupyter kernelspec list: %v\n%s", err, b)
	}
	ks, ok := specs.Kernelspecs["tfgpu"]
	if !ok || !strings.Contains(strings.Join(ks.Spec.Argv, " "), "-- "+vpy+" -m ipykernel_launcher") {
		t.Fatalf("the venv's Jupyter lists %s", b)
	}
	if code, out, errOut := run("--uninstall", "--prefix", prefix); code != 0 {
		t.Errorf("--uninstall after the venv install: exit %d\n%s%s", code, out, errOut)
	}
}
