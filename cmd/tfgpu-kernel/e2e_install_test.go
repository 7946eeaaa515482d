//go:build linux && e2e

// The install paths of the README, end to end, as their users take them
// (issue 21): a data scientist with a venv from PyPI, a real unprivileged
// user made with useradd, running ./install.sh from a copy of the
// repository with their own Go cache; and the admin installing for every
// user with ./install.sh --system, in a mount namespace of the test's own
// where /usr/local/bin and /usr/local/share are overlays, so the machine's
// are never written. Each path is installed, used from Jupyter, upgraded
// and uninstalled.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// installUser is a local user who installs for themselves.
type installUser struct {
	localUser
	t    *testing.T
	env  []string // HOME, PATH with Go, their own Go cache, the shared module cache
	repo string   // their copy of the repository
	ns   int      // with ns > 0, every command runs in that process's mount namespace
}

// run runs argv as u (nil u: root) in dir with env, within 5 minutes.
func runIn(t *testing.T, u *localUser, ns int, env []string, dir string, argv ...string) (int, string, string) {
	t.Helper()
	argv = asIn(u, ns, dir, argv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	if err != nil {
		t.Fatalf("%q: %v\n%s%s", argv, err, stdout.String(), stderr.String())
	}
	return 0, stdout.String(), stderr.String()
}

// asIn is argv run as u (nil: root, as is) in ns's mount namespace (0:
// ours) and directory dir.
func asIn(u *localUser, ns int, dir string, argv []string) []string {
	if u != nil {
		argv = append([]string{"setpriv", "--reuid", strconv.Itoa(u.uid), "--regid", strconv.Itoa(u.gid), "--clear-groups", "--"}, argv...)
	}
	if ns > 0 { // setns(2) into a mount namespace leaves the process in "/"
		argv = append([]string{"nsenter", "--mount=/proc/" + strconv.Itoa(ns) + "/ns/mnt", "--wd=" + dir, "--"}, argv...)
	}
	return argv
}

func (u *installUser) run(env []string, argv ...string) (int, string, string) {
	u.t.Helper()
	return runIn(u.t, &u.localUser, u.ns, env, u.repo, argv...)
}

// sharedGoModules is a module cache with this module's dependencies that
// every user can read (root's is in /root), filled from root's own cache:
// nothing is downloaded.
func sharedGoModules(t *testing.T, dir string) string {
	t.Helper()
	own, err := exec.Command("go", "env", "GOMODCACHE").Output()
	testutil.NoErr(t, err)
	mods := filepath.Join(dir, "gomod")
	dl := exec.Command("go", "build", "-o", os.DevNull, "./cmd/tfgpu-kernel") // fetches what the build needs, no more
	dl.Dir = filepath.Join("..", "..")
	dl.Env = append(os.Environ(), "GOMODCACHE="+mods, "GOFLAGS=-mod=mod", "GOPROXY=file://"+filepath.Join(strings.TrimSpace(string(own)), "cache", "download"), "GOSUMDB=off")
	if out, err := dl.CombinedOutput(); err != nil {
		t.Fatalf("go build with GOMODCACHE=%s: %v\n%s", mods, err, out)
	}
	if out, err := exec.Command("chmod", "-R", "a+rX", mods).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v\n%s", err, out)
	}
	return mods
}

// wheelhouse downloads, from PyPI, the wheels of ipykernel and
// jupyter_client at the current stack's pins, and pip's, into a directory
// every user can read: what a user's `pip install ipykernel` installs.
func wheelhouse(t *testing.T, dir string) string {
	t.Helper()
	vpy := stackPython(t, stackCurrent)
	pins, err := filepath.Abs(filepath.Join("testdata", "stacks", "current.txt"))
	testutil.NoErr(t, err)
	wh := filepath.Join(dir, "wheels")
	dl := exec.Command(vpy, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "-q", "--only-binary", ":all:",
		"-d", wh, "-c", pins, "pip", "ipykernel", "jupyter_client")
	if out, err := dl.CombinedOutput(); err != nil {
		t.Fatalf("pip download: %v\n%s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "a+rX", wh).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v\n%s", err, out)
	}
	return wh
}

// newInstallUser makes a user with a copy of the repository and a Go
// setup of their own (cold build cache; modules from mods).
func newInstallUser(t *testing.T, role, mods string) *installUser {
	t.Helper()
	lu := newLocalUser(t, role)
	u := &installUser{localUser: lu, t: t, repo: filepath.Join(lu.home, "tfgpu-kernel")}
	copyRepo(t, u.repo)
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", u.uid, u.gid), u.home).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	u.env = []string{"HOME=" + u.home, "USER=" + u.name, "LANG=C.UTF-8", "PATH=/usr/local/go/bin:/usr/bin:/bin",
		"GOMODCACHE=" + mods, "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local", "GOSUMDB=off",
		"CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations", "PYTHONDONTWRITEBYTECODE=1"}
	return u
}

// with is u's environment with PATH led by dir (when not "") and extra.
func (u *installUser) with(pathDir string, extra ...string) []string {
	env := slices.Clone(u.env)
	if pathDir != "" {
		for i, kv := range env {
			if strings.HasPrefix(kv, "PATH=") {
				env[i] = "PATH=" + pathDir + ":" + strings.TrimPrefix(kv, "PATH=")
			}
		}
	}
	return append(env, extra...)
}

// stderrResult is testdata/install/stderr.py's RESULT.
type stderrResult struct {
	Status, Cell          string
	Stdout, Stderr, Iopub []string
	Initialize, Attach    bool
}

// kernelPrints starts kernelspec name with python's jupyter_client as u
// and returns what the kernel printed.
func (u *installUser) kernelPrints(env []string, python, name string) stderrResult {
	u.t.Helper()
	script := filepath.Join(u.repo, "cmd", "tfgpu-kernel", "testdata", "install", "stderr.py")
	code, out, errOut := u.run(env, python, script, name)
	var r stderrResult
	i := strings.LastIndex(out, "RESULT ")
	if code != 0 || i < 0 || json.Unmarshal([]byte(out[i+len("RESULT "):]), &r) != nil || r.Status != "ok" || !r.Initialize || !r.Attach {
		u.t.Fatalf("kernel %s as %s: exit %d\n%s%s", name, u.name, code, out, errOut)
	}
	return r
}

// pydevdTime is the elapsed time pydevd puts before its lines ("0.00s - ").
var pydevdTime = regexp.MustCompile(`^[0-9]+\.[0-9]+s - `)

// kernelLines are what a kernel printed, without the supervisor's own
// log lines (they go to Jupyter's log, and say what happened) and
// without pydevd's timestamps.
func kernelLines(r stderrResult) []string {
	var out []string
	for _, l := range slices.Concat(r.Stdout, r.Stderr, r.Iopub) {
		if !strings.Contains(l, "prog=tfgpu-kernel") {
			out = append(out, pydevdTime.ReplaceAllString(l, ""))
		}
	}
	return out
}

// holdKernel starts kernelspec name as u (testdata/install/hold.py) and
// returns once it answers; the returned func shuts it down and waits.
func (u *installUser) holdKernel(env []string, python, name string) func() {
	u.t.Helper()
	argv := asIn(&u.localUser, u.ns, u.home, []string{python, filepath.Join(u.repo, "cmd", "tfgpu-kernel", "testdata", "install", "hold.py"), name})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, u.home
	_, stop := holdKernel(u.t, cmd, name+" of "+u.name)
	return stop
}

func listedSpecs(t *testing.T, out string) map[string]struct {
	ResourceDir string `json:"resource_dir"`
	Spec        struct{ Argv []string }
} {
	t.Helper()
	var l struct {
		Kernelspecs map[string]struct {
			ResourceDir string `json:"resource_dir"`
			Spec        struct{ Argv []string }
		}
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("jupyter kernelspec list --json: %v\n%s", err, out)
	}
	return l.Kernelspecs
}

func TestE2EInstall(t *testing.T) {
	installJupyterPython(t)
	shared := sharedDir(t)
	mods := sharedGoModules(t, shared)
	t.Run("venv", func(t *testing.T) { installVenvUser(t, mods, wheelhouse(t, shared)) })
	t.Run("system", func(t *testing.T) { installSystemWide(t, mods) })
}

// A data scientist with a venv from PyPI (ipykernel 7.4) on PATH: install,
// the kernel from their Jupyter, what it prints against the stock kernel,
// an upgrade from a shell without the venv, a venv without ipykernel, and
// uninstall with a kernel running.
func installVenvUser(t *testing.T, mods, wheels string) {
	u := newInstallUser(t, "carol", mods)
	venv := filepath.Join(u.home, "venvs", "tf")
	vpy := filepath.Join(venv, "bin", "python3")
	pipWhl, _ := filepath.Glob(filepath.Join(wheels, "pip-*.whl"))
	if len(pipWhl) != 1 {
		t.Fatalf("no pip wheel in %s", wheels)
	}
	for _, argv := range [][]string{
		{"/usr/bin/python3", "-m", "venv", "--without-pip", venv},
		{vpy, filepath.Join(pipWhl[0], "pip"), "install", "--disable-pip-version-check", "-q", "--no-index", "--find-links", wheels, "ipykernel", "jupyter_client"},
	} {
		if code, out, errOut := u.run(u.env, argv...); code != 0 {
			t.Fatalf("%q: exit %d\n%s%s", argv, code, out, errOut)
		}
	}
	withVenv := u.with(filepath.Join(venv, "bin"))

	code, out, errOut := u.run(withVenv, "./install.sh", "--", "--gpu-memory-limit", "40G", "--env", "CUDA_VISIBLE_DEVICES=0")
	bin := filepath.Join(u.home, ".local", "bin", "tfgpu-kernel")
	specDir := filepath.Join(u.home, ".local", "share", "jupyter", "kernels", "tfgpu")
	if code != 0 || !strings.Contains(out, "python "+vpy+" (ipykernel 7.") {
		t.Fatalf("./install.sh with a venv on PATH: exit %d\n%s%s", code, out, errOut)
	}
	s := readInstalledSpec(t, specDir)
	if s.Argv[0] != bin || s.kernelOf() != vpy+" -Xfrozen_modules=off -m ipykernel_launcher -f {connection_file}" {
		t.Fatalf("the kernelspec does not run the venv's Python as ipykernel 7 would:\n%s", s.raw)
	}
	code, out, _ = u.run(withVenv, filepath.Join(venv, "bin", "jupyter"), "kernelspec", "list", "--json")
	if ks, ok := listedSpecs(t, out)["tfgpu"]; code != 0 || !ok || ks.ResourceDir != specDir {
		t.Fatalf("the venv's jupyter does not list tfgpu in %s:\n%s", specDir, out)
	}

	// What the kernel prints: nothing the stock kernel of the same venv
	// (ipykernel install --user) does not; no debugpy warning.
	// TMPDIR: ipykernel's install leaves the empty directory it staged the
	// spec in (kernelspec/python.go); in the user's home it goes with the user.
	if code, out, errOut := u.run(append(slices.Clone(withVenv), "TMPDIR="+u.home), vpy, "-m", "ipykernel", "install", "--user", "--name", "stock"); code != 0 {
		t.Fatalf("ipykernel install: exit %d\n%s%s", code, out, errOut)
	}
	stock, ours := u.kernelPrints(withVenv, vpy, "stock"), u.kernelPrints(withVenv, vpy, "tfgpu")
	t.Logf("the venv's stock kernel printed %q; the tfgpu one %q", kernelLines(stock), kernelLines(ours))
	if !strings.Contains(ours.Cell, vpy+" 42") {
		t.Errorf("the cell ran in %q, want the venv's Python", ours.Cell)
	}
	for _, l := range kernelLines(ours) {
		if !slices.Contains(kernelLines(stock), l) || strings.Contains(l, "frozen") {
			t.Errorf("the tfgpu kernel printed %q, which the stock one did not (stock: %q)", l, kernelLines(stock))
		}
	}

	// Upgrade from a shell without the venv (python3 is Debian's): the
	// venv's Python and the settings stay.
	code, out, errOut = u.run(u.env, "./install.sh")
	wantKept := "kept from the installed kernelspec: python " + vpy + ", --gpu-memory-limit 40G, --env CUDA_VISIBLE_DEVICES=0"
	if code != 0 || !strings.Contains(out, wantKept) {
		t.Fatalf("upgrade: exit %d, want %q\n%s%s", code, wantKept, out, errOut)
	}
	if s2 := readInstalledSpec(t, specDir); string(s2.raw) != string(s.raw) {
		t.Errorf("the upgrade changed the kernelspec:\n%s\nwas\n%s", s2.raw, s.raw)
	}

	// A venv without ipykernel: pip for that venv, never apt.
	bare := filepath.Join(u.home, "venvs", "bare")
	if code, out, errOut := u.run(u.env, "/usr/bin/python3", "-m", "venv", "--without-pip", bare); code != 0 {
		t.Fatalf("venv: %d\n%s%s", code, out, errOut)
	}
	bpy := filepath.Join(bare, "bin", "python3")
	code, out, errOut = u.run(u.env, "./install.sh", "--python", bpy)
	if code != 1 || !strings.Contains(errOut, bpy+" -m pip install ipykernel") || strings.Contains(out+errOut, "apt-get") {
		t.Errorf("a venv without ipykernel: exit %d\n%s%s", code, out, errOut)
	}
	if s2 := readInstalledSpec(t, specDir); string(s2.raw) != string(s.raw) {
		t.Errorf("a refused install changed the kernelspec")
	}

	// Uninstall while a kernel runs on it: it is named, and left running.
	stop := u.holdKernel(withVenv, vpy, "tfgpu")
	code, out, errOut = u.run(u.env, "./install.sh", "--uninstall")
	stop()
	if code != 0 || !strings.Contains(out, "1 kernel(s) still running on it") || !strings.Contains(out, "removed "+bin) {
		t.Errorf("uninstall with a kernel running: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = u.run(withVenv, filepath.Join(venv, "bin", "jupyter"), "kernelspec", "list", "--json")
	if _, ok := listedSpecs(t, out)["tfgpu"]; code != 0 || ok {
		t.Errorf("tfgpu still listed after uninstall:\n%s", out)
	}
	for _, p := range []string{bin, specDir} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after uninstall: %v", p, err)
		}
	}
}

// The admin installs for every user (Debian's stack), in a mount
// namespace where /usr/local/bin and /usr/local/share are overlays of the
// machine's: an unprivileged user's Jupyter lists the kernelspec and runs
// it; root refuses a Python that user could change (and never runs it);
// an upgrade keeps the settings; uninstall names the user's running
// kernel; a non-root --system is refused.
func installSystemWide(t *testing.T, mods string) {
	u := newInstallUser(t, "dave", mods)
	scratch := t.TempDir()
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", `set -e
for d in bin share; do
	mkdir -p "$0/$d.upper" "$0/$d.work"
	mount -t overlay overlay -o "lowerdir=/usr/local/$d,upperdir=$0/$d.upper,workdir=$0/$d.work" "/usr/local/$d"
done
echo ready
exec sleep 3600`, scratch)
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := holder.StdoutPipe()
	var holderErr bytes.Buffer
	holder.Stderr = &holderErr
	testutil.NoErr(t, holder.Start())
	t.Cleanup(func() { syscall.Kill(holder.Process.Pid, syscall.SIGKILL); holder.Wait() })
	if l, _ := bufio.NewReader(out).ReadString('\n'); l != "ready\n" {
		t.Fatalf("the namespace's overlays: %q\n%s", l, holderErr.String())
	}
	ns := holder.Process.Pid
	u.ns = ns
	// Root works from a copy of its own (never runs a script a user could
	// change), with its own Go cache and a HOME without kernelspecs.
	rootRepo := filepath.Join(scratch, "src")
	copyRepo(t, rootRepo)
	root := func(env []string, argv ...string) (int, string, string) {
		t.Helper()
		return runIn(t, nil, ns, env, rootRepo, argv...)
	}
	cache, err := exec.Command("go", "env", "GOCACHE").Output()
	testutil.NoErr(t, err)
	rootEnv := append(u.with("", "GOCACHE="+strings.TrimSpace(string(cache))), "HOME="+scratch, "USER=root")
	bin := "/usr/local/bin/tfgpu-kernel"
	specDir := "/usr/local/share/jupyter/kernels/tfgpu"

	code, stdout, stderr := u.run(u.env, "./install.sh", "--system")
	if code != 1 || !strings.Contains(stderr, "run it as root") {
		t.Errorf("--system by a user: exit %d\n%s%s", code, stdout, stderr)
	}

	// umask 077, as some admins have: what is installed is still 0755/0644.
	code, stdout, stderr = root(rootEnv, "/bin/sh", "-c", `umask 077; exec ./install.sh --system --python /usr/bin/python3 --no-deps -- --gpu-memory-limit 40G`)
	if code != 0 || !strings.Contains(stdout, "installed kernelspec \"tfgpu\"") {
		t.Fatalf("./install.sh --system: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{bin + " root 755", "/usr/local/share/jupyter root 755", "/usr/local/share/jupyter/kernels root 755",
		specDir + " root 755", specDir + "/kernel.json root 644", specDir + "/logo-64x64.png root 644"} {
		p := strings.Fields(want)[0]
		if code, got, _ := root(rootEnv, "stat", "-c", "%n %U %a", p); code != 0 || strings.TrimSpace(got) != want {
			t.Errorf("after install --system under umask 077: %q, want %q", strings.TrimSpace(got), want)
		}
	}

	// The user's Jupyter (Debian's) lists it and runs it, as the user.
	code, stdout, stderr = u.run(u.env, "/usr/bin/python3", "-m", "jupyter_client.kernelspecapp", "list", "--json")
	if ks, ok := listedSpecs(t, stdout)["tfgpu"]; code != 0 || !ok || ks.ResourceDir != specDir || ks.Spec.Argv[0] != bin {
		t.Fatalf("%s's jupyter kernelspec list:\n%s%s", u.name, stdout, stderr)
	}
	ours := u.kernelPrints(u.env, "/usr/bin/python3", "tfgpu")
	if !strings.Contains(ours.Cell, "/usr/bin/python3 42") {
		t.Errorf("the system-wide kernel ran the cell in %q", ours.Cell)
	}
	stock := u.kernelPrints(u.env, "/usr/bin/python3", "python3") // Debian's, as jupyter_client finds it
	t.Logf("Debian's stock kernel printed %q; the tfgpu one %q", kernelLines(stock), kernelLines(ours))
	for _, l := range kernelLines(ours) {
		if !slices.Contains(kernelLines(stock), l) {
			t.Errorf("the tfgpu kernel printed %q, which Debian's stock one did not (stock: %q)", l, kernelLines(stock))
		}
	}

	// A Python the user could change is refused before it ever runs.
	marker := filepath.Join(u.home, "ran-as-root")
	fake := filepath.Join(u.home, "venvs", "evil", "bin", "python3")
	testutil.NoErr(t, os.MkdirAll(filepath.Dir(fake), 0o755))
	testutil.NoErr(t, os.WriteFile(fake, []byte("#!/bin/sh\ntouch "+marker+"\nexec /usr/bin/python3 \"$@\"\n"), 0o755))
	exec.Command("chown", "-R", fmt.Sprintf("%d:%d", u.uid, u.gid), filepath.Join(u.home, "venvs")).Run()
	code, stdout, stderr = root(rootEnv, "./install.sh", "--system", "--python", fake, "--no-deps")
	if _, err := os.Stat(marker); err == nil || code == 0 || !strings.Contains(stderr, "cannot serve every user") {
		t.Errorf("--system --python of the user's: exit %d, ran it: %v\n%s%s", code, err == nil, stdout, stderr)
	}

	// An upgrade keeps the Python and the limit.
	code, stdout, stderr = root(rootEnv, "./install.sh", "--system", "--no-deps")
	if code != 0 || !strings.Contains(stdout, "kept from the installed kernelspec: python /usr/bin/python3, --gpu-memory-limit 40G") {
		t.Errorf("upgrade --system: exit %d\n%s%s", code, stdout, stderr)
	}

	// Root leaving out --system is refused, naming what it would break,
	// and nothing is removed (#34).
	code, stdout, stderr = root(rootEnv, "./install.sh", "--uninstall")
	if code != 2 || !strings.Contains(stderr, "this would remove "+bin+", which the kernelspec for every user "+specDir+" runs") {
		t.Errorf("root's --uninstall without --system: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, _ := root(rootEnv, "test", "-x", bin); code != 0 {
		t.Errorf("root's refused --uninstall removed %s", bin)
	}

	// The user's own "tfgpu" (the system's binary, their data directory)
	// hides the one for every user: their doctor names both (#34). Their
	// uninstall does not name root's kernelspec, which is not theirs to
	// remove.
	own := filepath.Join(u.home, ".local", "share", "jupyter", "kernels", "tfgpu")
	if code, stdout, stderr := u.run(u.env, bin, "install", "--python", "/usr/bin/python3"); code != 0 {
		t.Fatalf("%s's install --user: exit %d\n%s%s", u.name, code, stdout, stderr)
	}
	code, stdout, stderr = u.run(u.env, bin, "doctor")
	if code != 1 || !strings.Contains(stdout, "!! kernelspec:   tfgpu in "+own+" hides "+specDir+" of the same name") {
		t.Errorf("%s's doctor with their own tfgpu: exit %d\n%s%s", u.name, code, stdout, stderr)
	}
	code, stdout, stderr = u.run(u.env, bin, "install", "--uninstall")
	if code != 0 || stdout != "removed kernelspec \"tfgpu\" from "+own+"\n" {
		t.Errorf("%s's install --uninstall: exit %d\n%s%s", u.name, code, stdout, stderr)
	}

	// Uninstall with the user's kernel running: named, with its user.
	stop := u.holdKernel(u.env, "/usr/bin/python3", "tfgpu")
	code, stdout, stderr = root(rootEnv, "./install.sh", "--uninstall", "--system")
	stop()
	if code != 0 || !strings.Contains(stdout, "1 kernel(s) still running on it") || !strings.Contains(stdout, "user "+u.name) ||
		!strings.Contains(stdout, "removed "+bin) {
		t.Errorf("uninstall --system with a kernel running: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = u.run(u.env, "/usr/bin/python3", "-m", "jupyter_client.kernelspecapp", "list", "--json")
	if _, ok := listedSpecs(t, stdout)["tfgpu"]; code != 0 || ok {
		t.Errorf("tfgpu still listed for %s after uninstall:\n%s", u.name, stdout)
	}
	if code, stdout, _ := root(rootEnv, "ls", "-A", "/usr/local/share/jupyter/kernels"); code != 0 || stdout != "" {
		t.Errorf("left in the kernels directory: %q", stdout)
	}
}
