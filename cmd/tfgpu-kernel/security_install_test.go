//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Issue 33, finding A: what root's ./install.sh builds, and then runs as
// root (and with --system every user runs), comes only from root's inputs.

// bobsSys is a copy of the golang.org/x/sys this module uses, as bob's,
// whose unix package's init() writes "uid N" to marker: the replacement a
// planted workspace or go.mod points the build at. It returns the copy.
func bobsSys(t *testing.T, bob localUser, dir, marker string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	if err != nil {
		t.Fatalf("go list -m golang.org/x/sys: %v", err)
	}
	orig := strings.TrimSpace(string(out))
	sys := filepath.Join(dir, "bobsys")
	testutil.NoErr(t, os.Mkdir(sys, 0o755))
	// The packages the binary imports (unix, cpu) and the module's go.mod.
	if out, err := exec.Command("cp", "-r", filepath.Join(orig, "go.mod"), filepath.Join(orig, "unix"), filepath.Join(orig, "cpu"), sys).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	plant := fmt.Sprintf(`package unix

import "syscall"

// bob's: leaves a mark, as whom it ran, in every program built with it.
func init() {
	fd, err := syscall.Open(%q, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, 0o644)
	if err != nil {
		return
	}
	u, b := syscall.Getuid(), []byte("uid ")
	if u == 0 {
		b = append(b, '0')
	}
	var d []byte
	for ; u > 0; u /= 10 {
		d = append([]byte{byte('0' + u%%10)}, d...)
	}
	syscall.Write(fd, append(append(b, d...), '\n'))
	syscall.Close(fd)
}
`, marker)
	testutil.NoErr(t, os.WriteFile(filepath.Join(sys, "unix", "zz_bob.go"), []byte(plant), 0o644))
	if out, err := exec.Command("chmod", "-R", "u+w,a+rX", sys).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v\n%s", err, out)
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", bob.uid, bob.gid), sys).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	return sys
}

// bob plants a Go workspace (go.work, replacing golang.org/x/sys by his
// copy whose init() leaves a mark) in a world-writable directory with the
// sticky bit above root's checkout, as anyone may in /tmp; root's
// environment names a go.mod of his (GOFLAGS=-modfile) or a go env file
// of his that names a workspace (GOENV). In each, root's ./install.sh
// builds, installs and runs its binary, which is run again afterwards:
// bob's code never runs, and install.sh says what it ignored.
// (GOFLAGS=-mod=mod alone does not bite: go.mod and go.sum are root's and
// complete; -modfile is how GOFLAGS brings in another go.mod.)
func TestSecurityInstallShBuildsOnlyRootsInputs(t *testing.T) {
	py := installJupyterPython(t)
	bob := newLocalUser(t, "bob")
	top := sharedDir(t)
	if err := os.Chmod(top, os.ModeSticky|0o777); err != nil { // as /tmp
		t.Fatal(err)
	}
	src := filepath.Join(top, "tfgpu-kernel") // root's clone
	copyRepo(t, src)
	marks := sharedDir(t)
	os.Chmod(marks, 0o777)
	marker := filepath.Join(marks, "ran")
	sys := bobsSys(t, bob, top, marker)
	goMod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	testutil.NoErr(t, err)
	goSum, err := os.ReadFile(filepath.Join(src, "go.sum"))
	testutil.NoErr(t, err)
	version := ""
	for _, l := range strings.Split(string(goMod), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "golang.org/x/sys" {
			version = f[1]
		}
	}
	bobs := bob.mkdir(t, filepath.Join(bob.home, "go"), 0o755)
	work := fmt.Sprintf("go %s\n\nuse %s\n\nreplace golang.org/x/sys %s => %s\n", goVersion(goMod), src, version, sys)

	for _, tc := range []struct {
		name string
		// plant writes bob's files and returns root's environment for
		// the attack and what install.sh must say it ignored ("" none).
		plant func(t *testing.T) (env []string, ignored string)
	}{
		{"go.work in a directory above the checkout", func(t *testing.T) ([]string, string) {
			p := bob.own(t, filepath.Join(top, "go.work"), []byte(strings.ReplaceAll(work, src, "./tfgpu-kernel")), 0o644)
			t.Cleanup(func() { os.Remove(p) })
			return nil, ""
		}},
		{"GOFLAGS=-modfile naming bob's go.mod", func(t *testing.T) ([]string, string) {
			mod := bob.own(t, filepath.Join(bobs, "go.mod"), append(slices.Clone(goMod), []byte("\nreplace golang.org/x/sys => "+sys+"\n")...), 0o644)
			bob.own(t, filepath.Join(bobs, "go.sum"), goSum, 0o644)
			return []string{"GOFLAGS=-modfile=" + mod}, "GOFLAGS"
		}},
		{"GOENV, a go env file of bob's naming his workspace", func(t *testing.T) ([]string, string) {
			w := bob.own(t, filepath.Join(bobs, "go.work"), []byte(work), 0o644)
			f := bob.own(t, filepath.Join(bobs, "env"), []byte("GOWORK="+w+"\n"), 0o644)
			return []string{"GOENV=" + f}, f + " (go env -w)"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(marker)
			sh, tmp := newInstallSh(t)
			sh.script = filepath.Join(src, "install.sh")
			env, ignored := tc.plant(t)
			sh.env = append(sh.env, env...)
			prefix := filepath.Join(tmp, "p")
			start := time.Now()
			code, out, errOut := sh.run("--prefix", prefix, "--python", py, "--no-deps")
			t.Logf("install.sh: exit %d in %v", code, time.Since(start).Round(time.Millisecond))
			bin := filepath.Join(prefix, "bin", "tfgpu-kernel")
			if code == 0 {
				if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
					t.Errorf("%s --version: %v\n%s", bin, err, out)
				}
			}
			markerGone(t, marker, "root's install.sh and the binary it built")
			if code != 0 {
				t.Fatalf("install.sh: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if ignored != "" && (!strings.Contains(out, "the build ignores") || !strings.Contains(out, ignored)) {
				t.Errorf("install.sh does not say it ignored %s:\n%s", ignored, out)
			}
		})
	}
}

// goVersion is the go line of a go.mod.
func goVersion(goMod []byte) string {
	for _, l := range strings.Split(string(goMod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// As root, ./install.sh builds nothing that another user could change: a
// checkout, a file in it, a directory above it without the sticky bit, a
// Go cache of theirs. Each is refused in one line that names the path,
// its owner or mode, and the fix, before anything is built or installed.
// --lab as root is refused too (npm and PyPI's build code would run as
// root), with the commands that build the wheel as a user.
func TestSecurityInstallShRefusesWhatUsersCanChange(t *testing.T) {
	bob := newLocalUser(t, "bob")
	parent := filepath.Join(sharedDir(t), "projects")
	testutil.NoErr(t, os.Mkdir(parent, 0o755))
	src := filepath.Join(parent, "tfgpu-kernel")
	copyRepo(t, src)
	bobsMods := bob.mkdir(t, filepath.Join(bob.home, "gomod"), 0o755)
	chown := func(p string, uid int) func() {
		os.Lchown(p, uid, uid)
		return func() { os.Lchown(p, 0, 0) }
	}
	chmod := func(p string, mode os.FileMode) func() {
		fi, _ := os.Stat(p)
		os.Chmod(p, mode)
		return func() { os.Chmod(p, fi.Mode()) }
	}
	bobIs := bob.name + " (uid " + strconv.Itoa(bob.uid) + ")"
	for _, tc := range []struct {
		name  string
		args  []string
		plant func() (undo func(), env []string)
		want  string // the refusal, after "install.sh: "
	}{
		{"a directory above it that everyone can write", nil, func() (func(), []string) { return chmod(parent, 0o777), nil },
			"refusing to build as root: " + parent + " (a directory above the checkout) is writable by its group and everyone (mode 0777) without the sticky bit"},
		{"bob's go.sum in it", nil, func() (func(), []string) { return chown(filepath.Join(src, "go.sum"), bob.uid), nil },
			"refusing to build as root: " + filepath.Join(src, "go.sum") + " (in the checkout) belongs to " + bobIs},
		{"a source file its group can write", nil, func() (func(), []string) {
			return chmod(filepath.Join(src, "cmd", "tfgpu-kernel", "main.go"), 0o664), nil
		}, "refusing to build as root: " + filepath.Join(src, "cmd", "tfgpu-kernel", "main.go") + " (in the checkout) is writable by its group (mode 0664)"},
		{"the checkout is bob's", nil, func() (func(), []string) { return chown(src, bob.uid), nil },
			"refusing to build as root: " + src + " (the checkout) belongs to " + bobIs},
		{"bob's module cache", nil, func() (func(), []string) { return func() {}, []string{"GOMODCACHE=" + bobsMods} },
			"refusing to build as root: " + bobsMods + " (the Go module cache, GOMODCACHE) belongs to " + bobIs},
		{"--lab", []string{"--lab", "/usr/bin/python3"}, func() (func(), []string) { return func() {}, nil },
			"--lab as root would run npm's and PyPI's build code (packages' install scripts included) as root; nothing installed."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, tmp := newInstallSh(t)
			sh.script = filepath.Join(src, "install.sh")
			undo, env := tc.plant()
			defer undo()
			sh.env = append(sh.env, env...)
			prefix := filepath.Join(tmp, "p")
			code, out, errOut := sh.run(append([]string{"--prefix", prefix, "--no-deps"}, tc.args...)...)
			t.Logf("exit %d: %s", code, strings.TrimSpace(errOut))
			if code != 1 || !isInstallErrLine(errOut, "install.sh: "+tc.want) || strings.Contains(out, "building") {
				t.Errorf("want exit 1 and one line %q; got exit %d\nstdout:\n%s\nstderr:\n%s", tc.want, code, out, errOut)
			}
			if _, err := os.Lstat(filepath.Join(prefix, "bin", "tfgpu-kernel")); !os.IsNotExist(err) {
				t.Errorf("a refused install.sh installed the binary: %v", err)
			}
		})
	}
}
