//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// installSh runs ./install.sh as CI does (no stdin), with env, in dir.
type installSh struct {
	t      *testing.T
	script string
	env    []string
	dir    string
	wrap   []string // argv before the script: e.g. unshare and a shell
}

// newInstallSh is install.sh with a temp HOME and JUPYTER_DATA_DIR, so the
// real system is not touched, and the Go setup of this test run.
func newInstallSh(t *testing.T, extra ...string) (*installSh, string) {
	t.Helper()
	testutil.Integration(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "install.sh"))
	testutil.NoErr(t, err)
	env, tmp := installEnv(t, extra...)
	env = append(env, "JUPYTER_DATA_DIR="+filepath.Join(tmp, "data"))
	// The temp HOME must not hide the Go setup: same caches, same go env file.
	for _, k := range []string{"GOENV", "GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	return &installSh{t: t, script: script, env: env, dir: tmp}, tmp
}

func (s *installSh) run(args ...string) (int, string, string) {
	s.t.Helper()
	argv := append(append(slices.Clone(s.wrap), s.script), args...)
	cmd := exec.Command(argv[0], argv[1:]...) // stdin: /dev/null, as under CI
	cmd.Dir = s.dir
	var stdout, stderr bytes.Buffer
	cmd.Env, cmd.Stdout, cmd.Stderr = s.env, &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatalf("install.sh %q: %v", args, err)
	}
	return code, stdout.String(), stderr.String()
}

// ownLines says every line install.sh said itself starts "install.sh: ".
func ownLines(s string) bool {
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if !strings.HasPrefix(l, "install.sh: ") {
			return false
		}
	}
	return s != ""
}

// TestInstallScript runs install.sh against a temp --prefix and data dir:
// its usage errors; an install with Debian's Python, flags passed through
// to `tfgpu-kernel install`; an upgrade that keeps them and the Python,
// from a shell whose python3 is another; --uninstall twice (idempotent),
// and once more after the binary is gone, which removes an orphaned
// kernelspec by itself. It needs the Go toolchain this test runs with and
// Debian's Jupyter stack (--no-deps: it never runs apt-get).
func TestInstallScript(t *testing.T) {
	py := installJupyterPython(t)
	sh, tmp := newInstallSh(t)
	data := filepath.Join(tmp, "data")

	if code, out, _ := sh.run("--help"); code != 0 || !strings.Contains(out, "--uninstall") || !strings.Contains(out, "--python PATH") ||
		!strings.Contains(out, "--system") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "install.sh: unknown argument '--bogus' (see ./install.sh --help)"},
		{[]string{"--prefix"}, "install.sh: --prefix needs a directory"},
		{[]string{"--user", "--system"}, "install.sh: --user and --system are exclusive"},
		{[]string{"--lab"}, "install.sh: --lab needs the Python that runs JupyterLab"},
	} {
		if code, out, errOut := sh.run(tc.args...); code != 2 || out != "" || !isInstallErrLine(errOut, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}

	prefix := filepath.Join(tmp, "p")
	bin := filepath.Join(prefix, "bin", "tfgpu-kernel")
	spec := filepath.Join(data, "kernels", "tfgpu")
	code, out, errOut := sh.run("--prefix", prefix, "--python", py, "--no-deps", "--", "--gpu-memory-limit", "40G", "--env", "CUDA_VISIBLE_DEVICES=0")
	remove := "install.sh --uninstall --prefix " + prefix
	if os.Geteuid() == 0 { // root is told to say --user
		remove = "install.sh --uninstall --user --prefix " + prefix
	}
	if code != 0 || !strings.Contains(out, remove) || !strings.Contains(out, "python "+py) {
		t.Fatalf("install.sh: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	s := readInstalledSpec(t, spec)
	if s.Argv[0] != bin || s.runFlagsOf() != "--gpu-memory-limit 40G" || s.Env["CUDA_VISIBLE_DEVICES"] != "0" || s.kernelOf() != py+" -m ipykernel_launcher -f {connection_file}" {
		t.Fatalf("kernelspec after install.sh:\n%s", s.raw)
	}
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v", bin, err)
	}

	// Again, from a shell whose python3 is a venv's: an upgrade keeps the
	// Python and the configuration.
	venv := systemSiteVenv(t, py)
	upgrade := *sh
	upgrade.env = append(slices.Clone(sh.env), "PATH="+filepath.Dir(venv)+":"+os.Getenv("PATH"))
	code, out, errOut = upgrade.run("--prefix", prefix, "--no-deps")
	if code != 0 || !strings.Contains(out, "kept from the installed kernelspec: python "+py+", --gpu-memory-limit 40G, --env CUDA_VISIBLE_DEVICES=0") {
		t.Fatalf("upgrade: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if s2 := readInstalledSpec(t, spec); string(s2.raw) != string(s.raw) {
		t.Errorf("the upgrade changed the kernelspec:\n%s\nwas\n%s", s2.raw, s.raw)
	}

	code, out, errOut = sh.run("--uninstall", "--prefix", prefix)
	if code != 0 || !ownLines(out) || errOut != "" || !strings.Contains(out, "removed kernelspec") || !strings.Contains(out, "removed "+bin) {
		t.Errorf("--uninstall: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, p := range []string{bin, spec} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after --uninstall: %v", p, err)
		}
	}
	code, out, errOut = sh.run("--uninstall", "--prefix="+prefix)
	if code != 0 || !ownLines(out) || strings.Count(out, "\n") != 1 || errOut != "" {
		t.Errorf("second --uninstall: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// A kernelspec whose binary is gone is removed too: no user is left
	// with a kernel that cannot start.
	if code, out, errOut = sh.run("--prefix", prefix, "--python", py, "--no-deps"); code != 0 {
		t.Fatalf("install.sh: exit %d\n%s%s", code, out, errOut)
	}
	testutil.NoErr(t, os.Remove(bin))
	code, out, errOut = sh.run("--uninstall", "--prefix", prefix)
	if _, err := os.Lstat(spec); code != 0 || !os.IsNotExist(err) || !strings.Contains(out, "was gone already") {
		t.Errorf("--uninstall without the binary: exit %d, kernelspec %v\n%s%s", code, err, out, errOut)
	}
}

// A setting the kernel would refuse is refused before anything is
// replaced (#34): the new binary is checked with 'install --dry-run'
// beside the old one, so an upgrade given --memory-limit 1K leaves the old
// binary (the same file) and its kernelspec, and a fresh install leaves
// nothing, not even the staged binary.
func TestInstallScriptChecksBeforeReplacing(t *testing.T) {
	py := installJupyterPython(t)
	sh, tmp := newInstallSh(t)
	prefix := filepath.Join(tmp, "p")
	bin := filepath.Join(prefix, "bin", "tfgpu-kernel")
	spec := filepath.Join(tmp, "data", "kernels", "tfgpu")
	if code, out, errOut := sh.run("--prefix", prefix, "--python", py, "--no-deps", "--", "--gpu-memory-limit", "40G"); code != 0 {
		t.Fatalf("install.sh: exit %d\n%s%s", code, out, errOut)
	}
	// A second link holds the old file's inode: its number cannot be
	// reused for a new file, so SameFile tells the old file from a new one.
	old := filepath.Join(tmp, "old-binary")
	testutil.NoErr(t, os.Link(bin, old))
	s := readInstalledSpec(t, spec)

	code, out, errOut := sh.run("--prefix", prefix, "--no-deps", "--", "--memory-limit", "1K")
	if code != 1 || !strings.Contains(errOut, "--memory-limit") || !strings.Contains(out, "nothing changed: "+bin) || strings.Contains(out, "installed "+bin) {
		t.Errorf("an upgrade with --memory-limit 1K: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if before, after := installStat(t, old), installStat(t, bin); !os.SameFile(before, after) {
		t.Errorf("a refused upgrade replaced %s", bin)
	}
	if s2 := readInstalledSpec(t, spec); string(s2.raw) != string(s.raw) {
		t.Errorf("a refused upgrade changed the kernelspec:\n%s", s2.raw)
	}
	if names := testutil.DirNames(t, filepath.Dir(bin)); !slices.Equal(names, []string{"tfgpu-kernel"}) {
		t.Errorf("left in %s: %q", filepath.Dir(bin), names)
	}

	fresh := filepath.Join(tmp, "fresh")
	sh2 := *sh
	sh2.env = append(slices.Clone(sh.env), "JUPYTER_DATA_DIR="+filepath.Join(tmp, "data2"))
	code, out, errOut = sh2.run("--prefix", fresh, "--python", py, "--no-deps", "--", "--memory-limit", "1K")
	if code != 1 || !strings.Contains(errOut, "--memory-limit") || !strings.Contains(out, "nothing installed") {
		t.Errorf("a fresh install with --memory-limit 1K: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if names := testutil.DirNames(t, filepath.Join(fresh, "bin")); len(names) != 0 {
		t.Errorf("a refused fresh install left %q in %s", names, filepath.Join(fresh, "bin"))
	}
	if _, err := os.Lstat(filepath.Join(tmp, "data2", "kernels", "tfgpu")); !os.IsNotExist(err) {
		t.Errorf("a refused fresh install left a kernelspec: %v", err)
	}
}

func installStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	testutil.NoErr(t, err)
	return fi
}

// A venv without ipykernel given with --python: the advice is that venv's
// pip, never apt (it is not resolved to the interpreter it links to), and
// nothing is left installed.
func TestInstallScriptAdvisesTheVenvsPip(t *testing.T) {
	py := installJupyterPython(t)
	sh, tmp := newInstallSh(t)
	bare := filepath.Join(tmp, "bare")
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", bare).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	bpy := filepath.Join(bare, "bin", "python3")
	prefix := filepath.Join(tmp, "p")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"given with --python", nil, []string{"--python", bpy}},
		{"first on PATH", []string{"PATH=" + filepath.Join(bare, "bin") + ":" + os.Getenv("PATH")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := *sh
			run.env = append(slices.Clone(sh.env), tc.env...)
			code, out, errOut := run.run(append([]string{"--prefix", prefix}, tc.args...)...)
			want := bpy + " -m pip install ipykernel"
			if code != 1 || !strings.Contains(errOut, want) || strings.Contains(errOut+out, "apt-get") || strings.Contains(errOut, "/usr/bin/python3.") {
				t.Errorf("exit %d, want 1 and %q, no apt\nstdout:\n%s\nstderr:\n%s", code, want, out, errOut)
			}
			if _, err := os.Lstat(filepath.Join(prefix, "bin", "tfgpu-kernel")); !os.IsNotExist(err) {
				t.Errorf("a failed install left the binary: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(tmp, "data", "kernels", "tfgpu")); !os.IsNotExist(err) {
				t.Errorf("a failed install left a kernelspec: %v", err)
			}
		})
	}
}

// copyRepo copies the repository's files (tracked, and new ones git does
// not ignore) to dst, readable by everyone: what a user clones.
func copyRepo(t *testing.T, dst string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	testutil.NoErr(t, err)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, rel := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		p := filepath.Join(dst, rel)
		testutil.NoErr(t, os.MkdirAll(filepath.Dir(p), 0o755))
		b, err := os.ReadFile(src)
		testutil.NoErr(t, err)
		testutil.NoErr(t, os.WriteFile(p, b, fi.Mode().Perm()|0o444))
	}
}

// asRootWithLocal is sh run as root in a mount namespace of its own, one
// per run, where bin is /usr/local/bin and share is /usr/local/share:
// --system writes there, never the machine's; bin and share (root's,
// 0755, as /usr/local's) stay from one run to the next.
func asRootWithLocal(t *testing.T, sh *installSh) (bin, share string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root: install.sh --system")
	}
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "true").CombinedOutput(); err != nil {
		testutil.RequireOrSkip(t, "needs unshare --mount: %s", strings.TrimSpace(string(out)))
	}
	bin, share = sharedDir(t), sharedDir(t)
	sh.wrap = []string{"unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
		`mount --bind "$1" /usr/local/bin && mount --bind "$2" /usr/local/share && shift 2 && exec "$@"`, "sh", bin, share}
	return bin, share
}

// As root, leaving out --user or --system is refused, in one line saying
// what it would break, when a kernelspec for every user is installed
// (#34): an uninstall would remove the binary it runs, an install would
// hide it behind root's own kernelspec and replace its binary. Nothing is
// built, replaced or removed then; said explicitly, --user goes ahead.
func TestInstallScriptAsRootSaysUserOrSystem(t *testing.T) {
	py := installJupyterPython(t)
	sh, tmp := newInstallSh(t)
	binDir, share := asRootWithLocal(t, sh)
	const bin, sys = "/usr/local/bin/tfgpu-kernel", "/usr/local/share/jupyter/kernels/tfgpu"
	if code, out, errOut := sh.run("--system", "--python", py, "--no-deps"); code != 0 {
		t.Fatalf("install.sh --system: exit %d\n%s%s", code, out, errOut)
	}
	old := filepath.Join(tmp, "old-binary") // holds the inode: see TestInstallScriptChecksBeforeReplacing
	testutil.NoErr(t, os.Link(filepath.Join(binDir, "tfgpu-kernel"), old))
	sysSpec := readInstalledSpec(t, filepath.Join(share, "jupyter", "kernels", "tfgpu"))
	untouched := func(what string) {
		t.Helper()
		if !os.SameFile(installStat(t, old), installStat(t, filepath.Join(binDir, "tfgpu-kernel"))) {
			t.Errorf("%s replaced or removed %s", what, bin)
		}
		if s := readInstalledSpec(t, filepath.Join(share, "jupyter", "kernels", "tfgpu")); string(s.raw) != string(sysSpec.raw) {
			t.Errorf("%s changed %s", what, sys)
		}
		if _, err := os.Lstat(filepath.Join(tmp, "data", "kernels", "tfgpu")); !os.IsNotExist(err) {
			t.Errorf("%s wrote root's own kernelspec: %v", what, err)
		}
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--uninstall"}, []string{"install.sh: as root without --user or --system, this would remove " + bin +
			", which the kernelspec for every user " + sys + " runs (no user's kernel would start): give --system for every user's, or --user for root's own"}},
		{[]string{"--python", py, "--no-deps"}, []string{"install.sh: as root without --user or --system, this would write root's own kernelspec \"tfgpu\", which hides the one for every user, " +
			sys + ", from root's Jupyter; and replace " + bin + ", which " + sys + " runs, and not " + sys + ":", "--user for root's own"}},
	} {
		code, out, errOut := sh.run(tc.args...)
		if code != 2 || out != "" || !isInstallErrLine(errOut, tc.want[0]) || !strings.Contains(errOut, tc.want[len(tc.want)-1]) {
			t.Errorf("install.sh %q as root: exit %d, stdout %q\nstderr %q\nwant exit 2 and %q", tc.args, code, out, errOut, tc.want)
		}
		untouched(strings.Join(tc.args, " "))
	}

	// Said explicitly, --user is root's choice.
	code, out, errOut := sh.run("--user", "--python", py, "--no-deps")
	if code != 0 || !strings.Contains(out, "./install.sh --uninstall --user") {
		t.Fatalf("install.sh --user as root: exit %d\n%s%s", code, out, errOut)
	}
	readInstalledSpec(t, filepath.Join(tmp, "data", "kernels", "tfgpu"))
	if code, out, errOut := sh.run("--uninstall", "--user"); code != 0 || !strings.Contains(out, "removed "+bin) {
		t.Errorf("install.sh --uninstall --user as root: exit %d\n%s%s", code, out, errOut)
	}
}

// Uninstall names every other kernelspec of ours that runs the binary it
// removes (a --wrap twin), with a command that removes it and still works
// once the binary is gone; --with-wraps removes them with it (#34: the
// twins were left running a missing binary, and the command the help
// gave for them needed that binary).
func TestInstallScriptUninstallsWraps(t *testing.T) {
	py := installJupyterPython(t)
	sh, tmp := newInstallSh(t)
	prefix := filepath.Join(tmp, "p")
	bin := filepath.Join(prefix, "bin", "tfgpu-kernel")
	kernels := filepath.Join(tmp, "data", "kernels")
	theirs := filepath.Join(tmp, "theirs", "mine")
	installWriteSpec(t, theirs, `{"argv": ["`+py+`", "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "Mine", "language": "python"}`, map[string]string{})
	twin := filepath.Join(kernels, "mine-tfgpu")
	install := func() {
		t.Helper()
		if code, out, errOut := sh.run("--prefix", prefix, "--python", py, "--no-deps"); code != 0 {
			t.Fatalf("install.sh: exit %d\n%s%s", code, out, errOut)
		}
		if r := runInstallBin(t, sh.env, bin, "install", "--wrap", theirs); r.code != 0 {
			t.Fatalf("install --wrap: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	gone := func(what string, paths ...string) {
		t.Helper()
		for _, p := range paths {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("%s: %s still there: %v", what, p, err)
			}
		}
	}

	// Without --with-wraps the twin stays, named, with the command.
	install()
	code, out, errOut := sh.run("--uninstall", "--prefix", prefix)
	again := "./install.sh --uninstall --with-wraps --prefix " + prefix
	if os.Geteuid() == 0 { // root is told to say --user
		again = "./install.sh --uninstall --with-wraps --user --prefix " + prefix
	}
	if code != 0 || !ownLines(out) || errOut != "" || !strings.Contains(out, `kernelspec "mine-tfgpu" in `+twin+" runs "+bin+" too and stays") ||
		!strings.Contains(out, `install.sh: left "mine-tfgpu" in `+twin+", which ran "+bin+" and cannot start now; remove: "+again+"\n") {
		t.Errorf("--uninstall with a twin: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	gone("--uninstall", bin, filepath.Join(kernels, "tfgpu"))
	readInstalledSpec(t, twin)
	// The command said, the binary gone.
	code, out, errOut = sh.run(strings.Fields(again)[1:]...)
	if code != 0 || !ownLines(out) || errOut != "" || !strings.Contains(out, `removed kernelspec "mine-tfgpu" from `+twin) {
		t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", again, code, out, errOut)
	}
	gone(again, twin)

	// With it, the binary removes its twins itself.
	install()
	code, out, errOut = sh.run("--uninstall", "--with-wraps", "--prefix", prefix)
	if code != 0 || !ownLines(out) || errOut != "" || !strings.Contains(out, `removed kernelspec "mine-tfgpu" from `+twin+" (it ran "+bin+" too)") ||
		strings.Contains(out, "left") {
		t.Errorf("--uninstall --with-wraps: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	gone("--uninstall --with-wraps", bin, filepath.Join(kernels, "tfgpu"), twin)
	if code, _, errOut := sh.run("--with-wraps"); code != 2 || !isInstallErrLine(errOut, "install.sh: --with-wraps goes with --uninstall") {
		t.Errorf("--with-wraps without --uninstall: exit %d, stderr %q", code, errOut)
	}
}

// install.sh's last word suggests a Jupyter the user has (#34: it said
// 'jupyter console', which a JupyterLab venv does not have): the console
// where there is one, else JupyterLab first on PATH or beside the
// kernel's Python, else the kernel list of whatever Jupyter they use.
// Debian's jupyter programs are hidden (/dev/null bound over them, in a
// mount namespace of the run's own) where a case has none.
func TestInstallScriptSuggestsAJupyterYouHave(t *testing.T) {
	py := installJupyterPython(t)
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root: mount namespaces hide Debian's jupyter programs")
	}
	sh, tmp := newInstallSh(t)
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	testutil.NoErr(t, err)
	path := filepath.Join(strings.TrimSpace(string(goroot)), "bin") + ":/usr/bin:/bin"
	vpy := systemSiteVenv(t, py)
	venvBin := filepath.Dir(vpy)
	console := filepath.Join(tmp, "console")
	for dir, progs := range map[string][]string{venvBin: {"jupyter", "jupyter-lab"}, console: {"jupyter", "jupyter-console"}} {
		testutil.NoErr(t, os.MkdirAll(dir, 0o755))
		for _, p := range progs { // never run: install.sh only looks for them
			testutil.NoErr(t, os.WriteFile(filepath.Join(dir, p), []byte("#!/bin/sh\nexit 1\n"), 0o755))
		}
	}
	debians, _ := filepath.Glob("/usr/bin/jupyter*")
	var frontends []string
	for _, p := range debians {
		switch filepath.Base(p) {
		case "jupyter-console", "jupyter-lab", "jupyter-notebook":
			frontends = append(frontends, p)
		}
	}
	prefix := filepath.Join(tmp, "p")
	for _, tc := range []struct {
		name   string
		path   string   // PATH's head
		hide   []string // files that read as /dev/null
		python string   // the kernel's
		want   string
	}{
		{"a console on PATH", console, nil, vpy, "Done. Next: run 'jupyter console --kernel tfgpu', or pick \"TF-GPU (clean restart)\" in Jupyter's kernel list."},
		{"a JupyterLab venv activated", venvBin, frontends, vpy, "Done. Next: run 'jupyter lab' and pick \"TF-GPU (clean restart)\" in its launcher."},
		{"a JupyterLab venv beside the kernel's Python", "", frontends, vpy, "Done. Next: run '" + filepath.Join(venvBin, "jupyter") + " lab' and pick \"TF-GPU (clean restart)\" in its launcher."},
		{"no jupyter at all", "", debians, py, "Done. Next: pick \"TF-GPU (clean restart)\" in the kernel list of the Jupyter you use (JupyterLab, Notebook, VS Code)."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := *sh
			p := path
			if tc.path != "" {
				p = tc.path + ":" + path
			}
			run.env = append(slices.Clone(sh.env), "PATH="+p)
			run.wrap = append([]string{"unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
				`while [ "$1" != -- ]; do mount --bind /dev/null "$1" || exit; shift; done; shift; exec "$@"`, "sh"}, append(tc.hide, "--")...)
			code, out, errOut := run.run("--prefix", prefix, "--python", tc.python, "--no-deps")
			if code != 0 || !strings.Contains(out, "\n"+tc.want+"\n") {
				t.Errorf("exit %d, want %q\nstdout:\n%s\nstderr:\n%s", code, tc.want, out, errOut)
			}
		})
	}
}
