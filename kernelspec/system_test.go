package kernelspec

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// A program every user's kernelspec names must be root's all the way up,
// writable by nobody else, and runnable by everyone.
func TestCheckSystemWide(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root: the files must be root's, and others' made with chown")
	}
	top := t.TempDir()
	testutil.NoErr(t, os.Chmod(top, 0o755))
	mk := func(rel string, mode os.FileMode, uid int) string {
		p := filepath.Join(top, rel)
		testutil.NoErr(t, os.MkdirAll(filepath.Dir(p), 0o755))
		testutil.NoErr(t, os.WriteFile(p, []byte("#!/bin/sh\n"), mode))
		testutil.NoErr(t, os.Chmod(p, mode))
		testutil.NoErr(t, os.Lchown(p, uid, uid))
		return p
	}
	good := mk("ok/bin/python3", 0o755, 0)
	link := filepath.Join(top, "ok/bin/python")
	testutil.NoErr(t, os.Symlink("python3", link))
	users := mk("venv/bin/python3", 0o755, 65534)
	groupW := mk("gw/bin/python3", 0o775, 0)
	private := mk("priv/bin/python3", 0o750, 0)
	openDir := filepath.Join(top, "open/bin/python3")
	mk("open/bin/python3", 0o755, 0)
	testutil.NoErr(t, os.Chmod(filepath.Dir(openDir), 0o777))
	closedDir := filepath.Join(top, "closed/bin/python3")
	mk("closed/bin/python3", 0o755, 0)
	testutil.NoErr(t, os.Chmod(filepath.Join(top, "closed"), 0o700))
	usersDir := filepath.Join(top, "home/alice/python3")
	mk("home/alice/python3", 0o755, 0)
	testutil.NoErr(t, os.Chown(filepath.Join(top, "home/alice"), 65534, 65534))
	toUsers := filepath.Join(top, "ok/bin/python-user")
	testutil.NoErr(t, os.Symlink(usersDir, toUsers))
	for _, tc := range []struct {
		name, path, want string // want: "" for accepted, else part of the error
	}{
		{"root's, 0755", good, ""},
		{"a link to it", link, ""},
		{"a user's file", users, "owned by uid 65534"},
		{"group-writable", groupW, "writable by its group"},
		{"others cannot run it", private, "cannot be run by other users"},
		{"a world-writable directory", openDir, "and everyone"},
		{"a directory others cannot enter", closedDir, "cannot be entered"},
		{"in a user's directory", usersDir, "owned by uid 65534"},
		{"a root link into a user's directory", toUsers, "owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkChain(tc.path, top, true)
			if real, rerr := filepath.EvalSymlinks(tc.path); err == nil && rerr == nil && real != tc.path {
				err = checkChain(real, top, true)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}

	// The real thing: Debian's Python passes, anything under /tmp does not.
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		if err := CheckSystemWide("/usr/bin/python3"); err != nil {
			t.Errorf("CheckSystemWide(/usr/bin/python3): %v", err)
		}
	}
	if err := CheckSystemWide(good); err == nil {
		t.Errorf("CheckSystemWide of a file in a test's private temporary directory: accepted")
	}
	if err := CheckSystemWide("python3"); err == nil {
		t.Error("a relative path accepted")
	}
}

// Install makes the directories it creates 0755 whatever the umask, so
// other users' Jupyter can read a --prefix or --system kernelspec.
func TestInstallDirectoriesIgnoreTheUmask(t *testing.T) {
	py := systemPython(t)
	isolate(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	prefix := filepath.Join(t.TempDir(), "a", "b")
	res, err := Install(Options{Binary: "/usr/local/bin/tfgpu-kernel", Python: py.Executable, Dest: Prefix, Prefix: prefix})
	testutil.NoErr(t, err)
	for p := res.Dir; p != filepath.Dir(prefix); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want 0755", p, fi.Mode(), err)
		}
	}
	fi, err := os.Stat(filepath.Join(res.Dir, "kernel.json"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("kernel.json: %v %v, want 0644", fi.Mode(), err)
	}
}

// Every absolute path in a system-wide kernelspec's argv and env values
// (list elements, a flag's value after '=') is checked; other values are
// not paths. /tmp, which everyone can write, stands for a user's place.
func TestCheckSystemWidePaths(t *testing.T) {
	if fi, err := os.Stat("/tmp"); err != nil || fi.Mode().Perm()&0o002 == 0 {
		t.Skipf("needs a world-writable /tmp: %v", err)
	}
	for _, tc := range []struct {
		value, want string // want: "" accepted, else the path refused
	}{
		{"0", ""},
		{"true", ""},
		{"lib:relative/dir", ""},
		{"/usr/bin:/bin", ""},
		{"/usr/lib/no-such-dir/lib64", ""}, // root's nearest directory: only root can make it
		{"/usr/bin:/tmp/bob/lib", "/tmp is writable"},
		{"--xla_gpu_cuda_data_dir=/tmp/cuda", "/tmp is writable"},
		{"a,/tmp;b", "/tmp is writable"},
	} {
		err := checkPathsIn(tc.value)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q refused: %v", tc.value, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: err = %v, want %q", tc.value, err, tc.want)
		}
	}
	kj := []byte(`{"argv": ["/usr/bin/python3", "-f", "{connection_file}"], "env": {"A": "1", "PYTHONPATH": "/usr/lib:/tmp/x"}}`)
	if err := checkSystemWidePaths(kj); err == nil || !strings.Contains(err.Error(), "env PYTHONPATH=/usr/lib:/tmp/x cannot serve every user: /tmp is writable") {
		t.Errorf("PYTHONPATH into /tmp: %v", err)
	}
}

// install --system tells a sticky directory's mode as it is: /tmp is 1777,
// and saying 0777 would hide the sticky bit (#36 item 4).
func TestStickyDirectoryModeIsTold(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root: the directories must be root's")
	}
	top := t.TempDir()
	testutil.NoErr(t, os.Chmod(top, 0o755))
	tmp := filepath.Join(top, "tmp")
	testutil.NoErr(t, os.Mkdir(tmp, 0o755))
	testutil.NoErr(t, os.Chmod(tmp, 0o777|os.ModeSticky))
	err := checkRootsAlone(filepath.Join(tmp, "venv", "bin", "python3"))
	if err == nil || !strings.Contains(err.Error(), tmp+" is writable by its group and everyone (mode 1777)") {
		t.Fatalf("a sticky directory: %v; want its mode told as 1777", err)
	}
}
