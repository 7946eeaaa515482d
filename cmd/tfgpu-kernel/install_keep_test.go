//go:build linux

package main

import (
	"bufio"
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

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/kernelspec"
)

// installedSpec reads back a kernel.json install wrote.
type installedSpec struct {
	Argv        []string          `json:"argv"`
	DisplayName string            `json:"display_name"`
	Env         map[string]string `json:"env"`
	raw         []byte
}

func readInstalledSpec(t *testing.T, dir string) installedSpec {
	t.Helper()
	b := readInstallFile(t, filepath.Join(dir, "kernel.json"))
	var s installedSpec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	s.raw = b
	return s
}

// runFlagsOf is the argv between "run" and "-f".
func (s installedSpec) runFlagsOf() string {
	f := slices.Index(s.Argv, "-f")
	if f < 2 {
		return "?"
	}
	return strings.Join(s.Argv[2:f], " ")
}

// kernelOf is the argv after "--".
func (s installedSpec) kernelOf() string {
	return strings.Join(s.Argv[slices.Index(s.Argv, "--")+1:], " ")
}

// systemSiteVenv makes a venv from Debian's Python that sees its packages
// (ipykernel among them): a second Python that imports ipykernel, made in
// a second, without the network.
func systemSiteVenv(t *testing.T, py string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(py, "-m", "venv", "--system-site-packages", "--without-pip", dir).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	return filepath.Join(dir, "bin", "python3")
}

// Running install again (an upgrade) keeps what the kernelspec was
// configured with: the Python (whatever python3 the upgrading shell has),
// run flags, --env and display name; what is given again wins, a run flag
// given empty is dropped, a run flag and its TFGPU_ variable are one
// setting, --reset starts afresh, and a changed Python is said.
func TestInstallUpgradeKeepsWhatWasConfigured(t *testing.T) {
	py := installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	venv := systemSiteVenv(t, py)
	env, tmp := installEnv(t, "PATH=/usr/bin:/bin") // python3 on PATH: Debian's, not the venv's
	prefix := filepath.Join(tmp, "p")
	dir := filepath.Join(prefix, "share/jupyter/kernels/tfgpu")
	install := func(args ...string) installRunResult {
		t.Helper()
		return runInstallBin(t, env, bin, append([]string{"install", "--prefix", prefix}, args...)...)
	}

	r := install("--python", venv, "--display-name", "GPU box", "--memory-limit", "8G", "--gpu-memory-limit", "40G",
		"--env", "CUDA_VISIBLE_DEVICES=0")
	if r.code != 0 {
		t.Fatalf("install: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	first := readInstalledSpec(t, dir)

	r = install("--replace")
	wantKept := `kept from the installed kernelspec: python ` + venv + `, display name "GPU box", --memory-limit 8G, --gpu-memory-limit 40G, --env CUDA_VISIBLE_DEVICES=0`
	if r.code != 0 || !strings.Contains(r.stdout, wantKept+"\n") || strings.Contains(r.stdout, "python changed") {
		t.Fatalf("upgrade: exit %d, want %q\n%s%s", r.code, wantKept, r.stdout, r.stderr)
	}
	if s := readInstalledSpec(t, dir); string(s.raw) != string(first.raw) {
		t.Errorf("an upgrade changed kernel.json:\n%s\nwas\n%s", s.raw, first.raw)
	}

	r = install("--replace", "--dry-run", "--memory-limit", "16G")
	if r.code != 0 || !strings.Contains(r.stdout, "would install kernelspec") {
		t.Errorf("--dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if s := readInstalledSpec(t, dir); string(s.raw) != string(first.raw) {
		t.Errorf("--dry-run wrote kernel.json")
	}

	r = install("--replace", "--memory-limit", "", "--env", "TFGPU_GPU_MEMORY_LIMIT=20G")
	s := readInstalledSpec(t, dir)
	if r.code != 0 || s.runFlagsOf() != "" || s.Env["TFGPU_GPU_MEMORY_LIMIT"] != "20G" || s.Env["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Errorf("an empty flag and the variable given: exit %d, run flags %q, env %v\n%s", r.code, s.runFlagsOf(), s.Env, r.stderr)
	}
	r = install("--replace", "--gpu-memory-limit", "30G")
	s = readInstalledSpec(t, dir)
	if _, has := s.Env["TFGPU_GPU_MEMORY_LIMIT"]; r.code != 0 || s.runFlagsOf() != "--gpu-memory-limit 30G" || has {
		t.Errorf("the flag given over the kept variable: exit %d, run flags %q, env %v\n%s", r.code, s.runFlagsOf(), s.Env, r.stderr)
	}

	r = install("--replace", "--python", py)
	s = readInstalledSpec(t, dir)
	if r.code != 0 || !strings.Contains(r.stdout, "python changed: "+venv+" → "+py+"\n") || s.kernelOf() != py+" -m ipykernel_launcher -f {connection_file}" {
		t.Errorf("a new Python: exit %d, kernel %q\n%s%s", r.code, s.kernelOf(), r.stdout, r.stderr)
	}

	// A kept value run would now refuse is said, naming where it came from.
	edited := strings.Replace(string(s.raw), `"30G"`, `"1K"`, 1)
	testutil.NoErr(t, os.WriteFile(filepath.Join(dir, "kernel.json"), []byte(edited), 0o644))
	r = install("--replace")
	if r.code != 2 || !isInstallErrLine(r.stderr, `tfgpu-kernel install: the installed kernelspec's --gpu-memory-limit "1K": too small`) {
		t.Errorf("a bad kept value: exit %d, stderr %q", r.code, r.stderr)
	}

	r = install("--replace", "--reset")
	s = readInstalledSpec(t, dir)
	if r.code != 0 || strings.Contains(r.stdout, "kept") || s.runFlagsOf() != "" || s.DisplayName != "TF-GPU (clean restart)" ||
		len(s.Env) != len(kernelspec.DefaultEnv) || s.Argv[slices.Index(s.Argv, "--")+1] != py {
		t.Errorf("--reset: exit %d, %s\n%s%s", r.code, s.raw, r.stdout, r.stderr)
	}
}

// Uninstall needs no jupyter command, removes the kernelspec, and names
// the kernels still running on it (which it leaves running).
func TestInstallUninstallSaysWhichKernelsRun(t *testing.T) {
	py := installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	state := testutil.PrivateDir(t)
	env, tmp := installEnv(t, "TFGPU_STATE_DIR="+state)
	prefix := filepath.Join(tmp, "p")
	env = append(env, "JUPYTER_PATH="+filepath.Join(prefix, "share/jupyter"))
	if r := runInstallBin(t, env, bin, "install", "--prefix", prefix, "--python", py); r.code != 0 {
		t.Fatalf("install: exit %d\n%s", r.code, r.stderr)
	}
	script, _ := filepath.Abs(filepath.Join("testdata", "install", "hold.py"))
	hold := exec.Command(py, script, "tfgpu")
	hold.Env = env
	supervisor, stop := holdKernel(t, hold, "tfgpu")
	t.Cleanup(func() {
		stop()
		if err := syscall.Kill(supervisor, 0); err == nil {
			syscall.Kill(supervisor, syscall.SIGKILL)
			t.Errorf("the supervisor %d outlived its shutdown", supervisor)
		}
	})
	r := runInstallBin(t, env, bin, "install", "--uninstall", "--prefix", prefix)
	if r.code != 0 || !strings.Contains(r.stdout, "removed kernelspec \"tfgpu\"") ||
		!strings.Contains(r.stdout, "1 kernel(s) still running on it: ") {
		t.Fatalf("uninstall with a kernel running: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := syscall.Kill(supervisor, 0); err != nil {
		t.Errorf("uninstall stopped the running kernel: %v", err)
	}
	if _, err := os.Stat(filepath.Join(prefix, "share/jupyter/kernels/tfgpu")); !os.IsNotExist(err) {
		t.Errorf("kernelspec left: %v", err)
	}
}

// Uninstall names the other kernelspecs of ours that run the same binary
// wherever Jupyter finds them, a --wrap twin in a venv's sys.prefix
// included (only the venv's Python knows that directory), and leaves
// them; --with-wraps removes them, also once the main one is gone (#34).
func TestInstallUninstallWithWraps(t *testing.T) {
	testutil.RequireHermetic(t)
	py := installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	realBin, _ := filepath.EvalSymlinks(bin)
	vpy := systemSiteVenv(t, py)
	env, tmp := installEnv(t, "JUPYTER_PATH=")
	data := filepath.Join(tmp, "data")
	env = append(env, "JUPYTER_DATA_DIR="+data, "PATH="+filepath.Dir(vpy)+":"+os.Getenv("PATH")) // the venv activated
	theirs := filepath.Join(tmp, "theirs", "mine")
	installWriteSpec(t, theirs, `{"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "Mine", "language": "python"}`, map[string]string{})
	twin := filepath.Join(filepath.Dir(filepath.Dir(vpy)), "share", "jupyter", "kernels", "mine-tfgpu")
	mainSpec := filepath.Join(data, "kernels", "tfgpu")
	for _, args := range [][]string{{"--python", vpy}, {"--wrap", theirs, "--sys-prefix", "--python", vpy}} {
		if r := runInstallBin(t, env, bin, append([]string{"install"}, args...)...); r.code != 0 {
			t.Fatalf("install %q: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	named := `kernelspec "mine-tfgpu" in ` + twin + " runs " + realBin + " too and stays (--with-wraps removes it with this one)\n"
	r := runInstallBin(t, env, bin, "install", "--uninstall", "--dry-run")
	if r.code != 0 || r.stdout != `would remove kernelspec "tfgpu" from `+mainSpec+"\n"+named {
		t.Errorf("uninstall --dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runInstallBin(t, env, bin, "install", "--uninstall")
	if r.code != 0 || r.stdout != `removed kernelspec "tfgpu" from `+mainSpec+"\n"+named {
		t.Errorf("uninstall: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	readInstalledSpec(t, twin)
	r = runInstallBin(t, env, bin, "install", "--uninstall", "--with-wraps")
	want := `no kernelspec "tfgpu" at ` + mainSpec + "\n" + `removed kernelspec "mine-tfgpu" from ` + twin + " (it ran " + realBin + " too)\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("uninstall --with-wraps: exit %d, want\n%s\ngot\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	if _, err := os.Lstat(twin); !os.IsNotExist(err) {
		t.Errorf("the twin is still there: %v", err)
	}
	if r = runInstallBin(t, env, bin, "install", "--uninstall", "--with-wraps"); r.code != 1 || !isInstallErrLine(r.stderr, "tfgpu-kernel install: no kernelspec at "+mainSpec) {
		t.Errorf("uninstall --with-wraps of nothing: exit %d, stderr %q", r.code, r.stderr)
	}
}

// holdKernel starts cmd, which runs testdata/install/hold.py (perhaps
// through setpriv and nsenter), in a process group of its own, and returns
// once the kernel answers, with the pid jupyter_client launched (the
// supervisor). stop shuts the kernel down and waits, killing the group
// after 30 s (and failing the test) if it has to.
func holdKernel(t *testing.T, cmd *exec.Cmd, what string) (pid int, stop func()) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var errOut testutil.Buffer
	cmd.Stderr = &errOut
	testutil.NoErr(t, cmd.Start())
	done := make(chan struct{})
	ready := make(chan int, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				n, _ := strconv.Atoi(p)
				ready <- n
			}
		}
		cmd.Wait()
	}()
	stop = func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("kernel %s did not shut down within 30 s", what)
		}
	}
	select {
	case pid = <-ready:
		return pid, stop
	case <-done:
		t.Fatalf("kernel %s did not start:\n%s", what, errOut.String())
	case <-time.After(2 * time.Minute):
		stop()
		t.Fatalf("kernel %s: not ready within 2 minutes", what)
	}
	return 0, stop
}
