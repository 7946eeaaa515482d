package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/kernelspec"
)

// `tfgpu-kernel install` aimed at the wheel's kernelspec (pip's) writes
// the admin's settings into PREFIX/etc/jupyter/tfgpu-kernel.json and
// leaves kernel.json as pip wrote it; a second install keeps what the
// file held unless given again; uninstall removes only the file
// (docs/design.md#the-wheel).
func TestInstallConfiguresTheWheelsKernelspec(t *testing.T) {
	bin := buildInstallTestBinary(t)
	env := append(os.Environ(), "HOME="+t.TempDir(), "JUPYTER_DATA_DIR=", "XDG_DATA_HOME=")
	prefix := t.TempDir()
	dir := filepath.Join(prefix, "share", "jupyter", "kernels", "tfgpu")
	testutil.NoErr(t, kernelspec.WriteLauncherSpec(dir, "v9"))
	pipped, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	testutil.NoErr(t, err)
	settings := filepath.Join(prefix, "etc", "jupyter", "tfgpu-kernel.json")
	install := func(args ...string) installRunResult {
		t.Helper()
		return runInstallBin(t, env, bin, append([]string{"install", "--prefix", prefix}, args...)...)
	}
	read := func() *kernelspec.Settings {
		t.Helper()
		s, err := kernelspec.ReadSettings(settings)
		testutil.NoErr(t, err)
		return s
	}

	if r := install("--memory-limit", "8G", "--env", "CUDA_VISIBLE_DEVICES=0", "--dry-run"); r.code != 0 || read() != nil ||
		!strings.Contains(r.stdout, "would configure kernelspec \"tfgpu\" in "+dir) {
		t.Fatalf("--dry-run: exit %d, %q %q, settings %v", r.code, r.stdout, r.stderr, read())
	}
	r := install("--memory-limit", "8G", "--env", "CUDA_VISIBLE_DEVICES=0")
	if s := read(); r.code != 0 || s == nil || !slices.Equal(s.RunFlags, []string{"--memory-limit", "8G"}) ||
		s.Env["CUDA_VISIBLE_DEVICES"] != "0" || len(s.Env) != 1 {
		t.Fatalf("install: exit %d, %q %q, settings %+v", r.code, r.stdout, r.stderr, s)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "kernel.json")); string(now) != string(pipped) {
		t.Fatalf("kernel.json, pip's, was rewritten:\n%s", now)
	}
	// Again with two more settings, one a boolean: the file's are kept;
	// then once more with none, the boolean read back too.
	r = install("--gpu-memory-limit", "40G", "--no-spare")
	want := []string{"--memory-limit", "8G", "--gpu-memory-limit", "40G", "--no-spare=true"}
	if s := read(); r.code != 0 || !slices.Equal(s.RunFlags, want) ||
		s.Env["CUDA_VISIBLE_DEVICES"] != "0" || !strings.Contains(r.stdout, "kept from "+settings+": --memory-limit 8G, --env CUDA_VISIBLE_DEVICES=0") {
		t.Fatalf("second install: exit %d, %q %q, settings %+v", r.code, r.stdout, r.stderr, s)
	}
	r = install()
	if s := read(); r.code != 0 || !slices.Equal(s.RunFlags, want) || s.Env["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Fatalf("second install: exit %d, %q %q, settings %+v", r.code, r.stdout, r.stderr, s)
	}
	// Refused, naming what was typed, and nothing changes.
	for _, args := range [][]string{
		{"--memory-limit", "1K"},
		{"--env", "TFGPU_MEMORY_LIMT=8G"},
		{"--display-name", "Mine"},
		{"--wrap", dir},
	} {
		before, _ := os.ReadFile(settings)
		r := install(args...)
		after, _ := os.ReadFile(settings)
		if r.code == 0 || !isInstallErrLine(r.stderr, "tfgpu-kernel install: ") || string(before) != string(after) {
			t.Errorf("install %q: exit %d, stderr %q; settings changed: %v", args, r.code, r.stderr, string(before) != string(after))
		}
	}
	if r := install("--reset"); r.code != 2 { // --reset goes with --replace
		t.Errorf("--reset alone: exit %d %q", r.code, r.stderr)
	}
	if r := install("--replace", "--reset", "--kill-timeout", "3s"); r.code != 0 || !slices.Equal(read().RunFlags, []string{"--kill-timeout", "3s"}) || len(read().Env) != 0 {
		t.Fatalf("--reset: exit %d %q %q, settings %+v", r.code, r.stdout, r.stderr, read())
	}
	r = install("--uninstall")
	if _, err := os.Stat(settings); r.code != 0 || !os.IsNotExist(err) || !strings.Contains(r.stdout, "removed "+settings) {
		t.Fatalf("--uninstall: exit %d %q %q, settings: %v", r.code, r.stdout, r.stderr, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kernel.json")); err != nil {
		t.Fatalf("--uninstall removed pip's kernelspec: %v", err)
	}
	if r := install("--uninstall"); r.code != 0 || !strings.Contains(r.stdout, "'pip uninstall tfgpu-kernel' removes it") {
		t.Fatalf("--uninstall without settings: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	// Root writes no settings where another user can write: mallory's
	// venv (a real user), where she planted etc as a link to a directory
	// of root's.
	if os.Geteuid() != 0 {
		return
	}
	mallory := testutil.NewUser(t, "mallory", nil)
	os.RemoveAll(filepath.Join(prefix, "etc"))
	testutil.NoErr(t, os.Chmod(filepath.Dir(prefix), 0o755))
	testutil.NoErr(t, os.Chown(prefix, mallory.UID, mallory.GID))
	elsewhere := t.TempDir()
	ln := exec.Command("ln", "-s", elsewhere, filepath.Join(prefix, "etc"))
	ln.SysProcAttr = &syscall.SysProcAttr{Credential: mallory.Cred}
	if out, err := ln.CombinedOutput(); err != nil {
		t.Fatalf("mallory's ln -s: %v %s", err, out)
	}
	r = install("--memory-limit", "8G")
	if m, _ := filepath.Glob(filepath.Join(elsewhere, "*", "*")); r.code != 1 || len(m) != 0 ||
		!isInstallErrLine(r.stderr, "tfgpu-kernel install: as root, settings go only where no other user can write, and "+settings+" is not such a place: ") {
		t.Fatalf("root's install into nobody's prefix: exit %d, stderr %q, written %v", r.code, r.stderr, m)
	}
}

// doctor knows the wheel's kernelspec: the binary pip put beside it, the
// environment's Python and ipykernel, its settings file; and says how to
// mend a missing binary or a bad settings file.
func TestDoctorKnowsTheWheelsKernelspec(t *testing.T) {
	testutil.RequireHermetic(t)
	installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	prefix := t.TempDir()
	dir := filepath.Join(prefix, "share", "jupyter", "kernels", "tfgpu")
	testutil.NoErr(t, kernelspec.WriteLauncherSpec(dir, "v9"))
	testutil.NoErr(t, os.MkdirAll(filepath.Join(prefix, "bin"), 0o755))
	testutil.NoErr(t, os.Symlink("/usr/bin/python3", filepath.Join(prefix, "bin", "python")))
	settings := kernelspec.SettingsPath(dir)
	testutil.NoErr(t, kernelspec.WriteSettings(settings, kernelspec.Settings{RunFlags: []string{"--no-spare=true"}, Env: map[string]string{"CUDA_VISIBLE_DEVICES": "1"}}))
	env := append(os.Environ(), "HOME="+t.TempDir(), "JUPYTER_DATA_DIR="+t.TempDir(), "TFGPU_STATE_DIR="+testutil.PrivateDir(t),
		"JUPYTER_PATH="+filepath.Join(prefix, "share", "jupyter"))
	line := "kernelspec:   tfgpu in " + dir + " (the tfgpu-kernel wheel's"

	r := runInstallBin(t, env, bin, "doctor")
	if !strings.Contains(r.stdout, "!! "+line+"): its supervisor "+filepath.Join(prefix, "bin", "tfgpu-kernel")+" is missing") ||
		!strings.Contains(r.stdout, "fix:          pip install --force-reinstall tfgpu-kernel") {
		t.Fatalf("doctor, the wheel's binary missing: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	testutil.NoErr(t, os.Symlink(bin, filepath.Join(prefix, "bin", "tfgpu-kernel")))
	r = runInstallBin(t, env, bin, "doctor")
	want := "ok " + line + ", " + filepath.Join(prefix, "bin", "tfgpu-kernel") + "), the server's Python: 3."
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "with ipykernel 6.") ||
		!strings.Contains(r.stdout, "settings in "+settings+": --no-spare=true --env CUDA_VISIBLE_DEVICES=1, no spare kernel (--no-spare=true)") {
		t.Fatalf("doctor, want %q:\n%s%s", want, r.stdout, r.stderr)
	}
	testutil.NoErr(t, os.WriteFile(settings, []byte(`{"run_flags": ["--memory-limit"]}`), 0o644))
	r = runInstallBin(t, env, bin, "doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "!! "+line) || !strings.Contains(r.stdout, "are not --flag value pairs") {
		t.Fatalf("doctor, a bad settings file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Root's `tfgpu-kernel install` with no destination, beside a kernelspec
// of ours for every user of the same name, is refused in one line saying
// which and asking for --user or --system (#34): root's own (the default)
// hid the system's from root's Jupyter. In the test's mount namespace,
// where /usr/local/share/jupyter is an empty tmpfs.
func TestInstallAsRootSaysUserOrSystem(t *testing.T) {
	testutil.RequireHermetic(t)
	if os.Geteuid() != 0 {
		t.Skip("root's install")
	}
	installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "JUPYTER_DATA_DIR=", "XDG_DATA_HOME=")
	own := filepath.Join(home, ".local", "share", "jupyter", "kernels", "tfgpu")
	sys := filepath.Join(kernelspec.SystemDataDir, "kernels", "tfgpu")
	// No system kernelspec: the default goes ahead (root's own).
	if r := runInstallBin(t, env, bin, "install", "--python", "/usr/bin/python3"); r.code != 0 {
		t.Fatalf("install as root, no system kernelspec: exit %d %s", r.code, r.stderr)
	}
	if r := runInstallBin(t, env, bin, "install", "--uninstall"); r.code != 0 {
		t.Fatalf("uninstall: exit %d %s", r.code, r.stderr)
	}
	t.Cleanup(func() { os.RemoveAll(sys) })
	// The system's kernelspec (--system's directory; --prefix, as this
	// test binary is not one every user may run).
	if r := runInstallBin(t, env, bin, "install", "--prefix", filepath.Dir(filepath.Dir(kernelspec.SystemDataDir)), "--python", "/usr/bin/python3"); r.code != 0 {
		t.Fatalf("install into %s: exit %d %s", sys, r.code, r.stderr)
	}
	r := runInstallBin(t, env, bin, "install", "--python", "/usr/bin/python3")
	if _, err := os.Stat(own); r.code != 2 || !os.IsNotExist(err) || !isInstallErrLine(r.stderr, "tfgpu-kernel install: as root without --user or --system: "+sys+" is the kernelspec \"tfgpu\" for every user") {
		t.Fatalf("install as root beside the system's: exit %d, stderr %q, root's own: %v", r.code, r.stderr, err)
	}
	if r := runInstallBin(t, env, bin, "install", "--user", "--python", "/usr/bin/python3"); r.code != 0 {
		t.Fatalf("install --user as root: exit %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(own); err != nil {
		t.Fatalf("--user wrote no kernelspec of root's own: %v", err)
	}
}
