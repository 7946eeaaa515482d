package record

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// A state directory is the user's own or it is not used.
func TestStateDirMustBeTheUsersOwn(t *testing.T) {
	requireRootUser(t)
	base := testutil.PrivateDir(t)
	mk := func(name string, mode os.FileMode, uid int) string {
		d := filepath.Join(base, name)
		testutil.NoErr(t, os.Mkdir(d, mode))
		os.Chmod(d, mode)
		os.Chown(d, uid, uid)
		return d
	}
	own := mk("own", 0o700, 0)
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"someone else's", mk("bobs", 0o777, nobody), "belongs to uid 65534, not to you"},
		{"group-writable", mk("open", 0o770, 0), "has mode 0770; it must be 0700"},
		{"a link to the user's own", func() string {
			l := filepath.Join(base, "link")
			os.Symlink(own, l)
			return l
		}(), "is a link or not a directory"},
		{"relative", "state", "not an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenDir(tc.dir, true, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("OpenDir(%s) = %v, want one line with %q", tc.dir, err, tc.want)
			}
		})
	}
	d, err := OpenDir(filepath.Join(base, "new", "state"), true, false)
	testutil.NoErr(t, err)
	d.Close()
	if fi, err := os.Stat(filepath.Join(base, "new", "state")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v; want 0700", fi.Mode(), err)
	}
	// Root reading a user's records accepts the user's directory.
	if d, err := OpenDir(mk("users", 0o700, nobody), false, true); err != nil || d.uid != nobody {
		t.Fatalf("root reading a user's directory: %v", err)
	}
}

// Files in a state directory are read without following links, only when
// the directory's owner owns them, and written by rename, which replaces a
// planted link instead of writing through it.
func TestStateDirFilesAreNeverFollowed(t *testing.T) {
	requireRootUser(t)
	dir := testutil.PrivateDir(t)
	victim := filepath.Join(t.TempDir(), "bashrc")
	testutil.NoErr(t, os.WriteFile(victim, []byte("export PS1=mine\n"), 0o600))
	d, err := OpenDir(dir, false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	os.Symlink(victim, filepath.Join(dir, "k1.gpu"))
	if _, err := d.read("k1.gpu"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("read through a link: %v", err)
	}
	if err := d.write("k1.gpu", []byte(`{"held":[]}`)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "export PS1=mine\n" {
		t.Fatalf("the link's target was written: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "k1.gpu")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("k1.gpu is %v, %v; want a regular 0600 file", fi.Mode(), err)
	}
	os.WriteFile(filepath.Join(dir, "k2.json"), []byte("{}"), 0o600)
	os.Chown(filepath.Join(dir, "k2.json"), nobody, nobody)
	if _, err := d.read("k2.json"); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("read of another user's file: %v", err)
	}
	syscall.Mkfifo(filepath.Join(dir, "k3.json"), 0o600)
	if _, err := d.read("k3.json"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("read of a fifo: %v", err)
	}
	if _, err := d.read("../escape.json"); err == nil {
		t.Fatal("a name with a separator was read")
	}
}

// Records whose kernel id is not of the shape supervisors write, or not
// the one their file is named after, are refused and said.
func TestStatesRefuseBadRecords(t *testing.T) {
	dir := testutil.PrivateDir(t)
	for name, body := range map[string]string{
		"good-1.json":   `{"kernel_id": "good-1", "supervisor_pid": 1}`,
		"other.json":    `{"kernel_id": "good-2"}`,
		"dotdot.json":   `{"kernel_id": "../dotdot"}`,
		"escape.json":   `{"kernel_id": "a\u001b[31mb"}`,
		"partial.json":  `{"kernel_`,
		".hidden.json":  `{"kernel_id": "hidden"}`,
		"notjson.state": `x`,
	} {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600)
	}
	states, refused, err := ReadStates(dir)
	if err != nil || len(states) != 1 || states[0].KernelID != "good-1" || states[0].Owner != os.Geteuid() {
		t.Fatalf("states %+v, %v", states, err)
	}
	if len(refused) != 3 {
		t.Fatalf("refused %v, want the three bad records", refused)
	}
	for _, r := range refused {
		if !errors.Is(r, ErrRefused) || strings.ContainsRune(Printable(r.Error()), 0x1b) {
			t.Errorf("refusal %q", r)
		}
	}
}

// Each field of a record is checked against what a supervisor of that
// kernel, run by the record's owner, makes.
func TestRecordFieldsAreChecked(t *testing.T) {
	requireRootUser(t)
	parent := requireCgroupV2(t)
	tmp := testutil.PrivateDir(t)
	id := "5b2c1e7a-0000-4000-8000-000000000001"
	st := State{KernelID: id, SupervisorPID: 4242, Owner: 0}

	real := filepath.Join(parent, "tfgpu-"+id+"-4242")
	testutil.NoErr(t, os.Mkdir(real, 0o755))
	t.Cleanup(func() { os.Remove(real) })
	fake := filepath.Join(tmp, "tfgpu-"+id+"-4242")
	os.Mkdir(fake, 0o755)
	link := filepath.Join(tmp, "cg")
	os.Symlink(parent, link)
	for _, tc := range []struct {
		name, cgroup, want string
	}{
		{"the supervisor's cgroup", real, ""},
		{"not on a cgroup file system", fake, "not on a cgroup file system"},
		{"through a link", filepath.Join(link, "tfgpu-"+id+"-4242"), "symbolic link"},
		{"another supervisor's name", filepath.Join(parent, "tfgpu-"+id+"-999"), "not named as"},
		{"another kernel's name", filepath.Join(parent, "tfgpu-other-4242"), "not named as"},
		{"not clean", parent + "/x/../tfgpu-" + id + "-4242", "not a clean absolute path"},
		{"relative", "tfgpu-" + id + "-4242", "not a clean absolute path"},
	} {
		t.Run("cgroup/"+tc.name, func(t *testing.T) {
			s := st
			s.Cgroup = tc.cgroup
			got, err := s.checkedCgroup()
			if tc.want == "" {
				if err != nil || got != tc.cgroup {
					t.Fatalf("checkedCgroup = %q, %v", got, err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkedCgroup(%s) = %q, %v; want refused: %q", tc.cgroup, got, err, tc.want)
			}
		})
	}
	t.Run("cgroup/someone else's", func(t *testing.T) {
		os.Chown(real, nobody, nobody)
		defer os.Chown(real, 0, 0)
		s := st
		s.Cgroup = real
		if _, err := s.checkedCgroup(); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Fatalf("got %v", err)
		}
	})

	tmpRoot := os.TempDir()
	inner := filepath.Join(tmpRoot, "tfgpu-"+ShortID(id)+"-123456")
	os.Mkdir(inner, 0o700)
	t.Cleanup(func() { os.RemoveAll(inner) })
	home := filepath.Join(tmp, "home")
	os.Mkdir(home, 0o700)
	for _, tc := range []struct{ name, dir, want string }{
		{"the supervisor's", inner, ""},
		{"a home directory", home, "not named as"},
		{"the right name in the wrong place", filepath.Join(tmp, "tfgpu-"+ShortID(id)+"-1"), "not in a runtime or temporary directory"},
		{"a file of the right name", func() string {
			p := filepath.Join(tmpRoot, "tfgpu-"+ShortID(id)+"-7")
			os.WriteFile(p, nil, 0o600)
			t.Cleanup(func() { os.Remove(p) })
			return p
		}(), "not a directory"},
	} {
		t.Run("inner/"+tc.name, func(t *testing.T) {
			s := st
			s.InnerDir = tc.dir
			got, err := s.checkedInnerDir()
			if tc.want == "" {
				if err != nil || got != tc.dir {
					t.Fatalf("checkedInnerDir = %q, %v", got, err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkedInnerDir(%s) = %q, %v; want refused: %q", tc.dir, got, err, tc.want)
			}
		})
	}

	// A pid is the record's only with its start time and owner, alive.
	self := os.Getpid()
	start, _ := proc.StartTime(self)
	s := st
	if !s.owns(self, start) {
		t.Error("owns(self) = false")
	}
	if s.owns(self, start+1) {
		t.Error("owns with another start time")
	}
	s.Owner = nobody
	if s.owns(self, start) {
		t.Error("owns a process of another user")
	}
	s.Owner, s.BootID = 0, "another-boot"
	if s.owns(self, start) {
		t.Error("owns a process with a record of another boot")
	}
	zombie := zombieChild(t)
	zstart, _ := proc.StartTime(zombie)
	if (State{Owner: 0}).owns(zombie, zstart) {
		t.Error("owns a zombie")
	}
}

// zombieChild starts a child that exits and is not reaped until cleanup.
func zombieChild(t *testing.T) int {
	t.Helper()
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
	testutil.NoErr(t, err)
	t.Cleanup(func() {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	})
	for range 200 {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(b), ") Z ") {
			return pid
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 5e6}, nil)
	}
	t.Fatal("child never became a zombie")
	return 0
}

// What root's terminal shows of what a user wrote: no escape sequences,
// nothing that reorders the line (U+202E) or breaks it (U+2028), nothing
// invisible; the rest of the text as it is.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"train.ipynb":               "train.ipynb",
		"naïve café 🚀.ipynb":        "naïve café 🚀.ipynb",
		"nb\x1b]0;owned\x07\x1b[2J": "nb?]0;owned??[2J",
		"evil\u202egnp.exe":         "evil?gnp.exe",
		"line\u2028break\u2029para": "line?break?para",
		"zero\u200bwidth\ufeffbom":  "zero?width?bom",
		"isolate\u2066x\u2069":      "isolate?x?",
		"c1\u0085\u009b":            "c1??",
		"bad \xff utf8":             "bad \ufffd utf8",
		"two\nlines":                "two; lines",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// What a user wrote is also cut to size, visibly, at a character
// boundary, the mark within the size and saying how much was left out
// (issue 33).
func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in  string
		max int
	}{
		{"short", 10},
		{"exactly10!", 10},
		{strings.Repeat("a", 100), 30},
		{strings.Repeat("a", 1000), 30},
		{strings.Repeat("é", 50), 30},
		{"x\u202e" + strings.Repeat("b", 100), 30},
		{strings.Repeat("z", 5000), MaxName},
	} {
		got := Cut(tc.in, tc.max)
		p := printable(tc.in)
		if len(p) <= tc.max {
			if got != p {
				t.Errorf("Cut(%.20q, %d) = %q, want it whole", tc.in, tc.max, got)
			}
			continue
		}
		kept, mark, ok := strings.Cut(got, "…(+")
		if !ok || len(got) > tc.max || !utf8.ValidString(got) || !strings.HasPrefix(p, kept) ||
			mark != strconv.Itoa(len(p)-len(kept))+" bytes)" {
			t.Errorf("Cut(%.20q…, %d) = %q (%d bytes): want a prefix, the bytes left out, within %d", tc.in, tc.max, got, len(got), tc.max)
		}
	}
	if got := Printable(strings.Repeat("p", 5000)); len(got) > MaxText || !strings.HasSuffix(got, "bytes)") {
		t.Errorf("Printable of 5000 bytes is %d bytes", len(got))
	}
}
