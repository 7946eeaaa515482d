package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// User is a real local user made with useradd for one test, and removed
// (userdel) after it: the other users of a shared host, in attack tests.
type User struct {
	Name     string
	UID, GID int
	Cred     *syscall.Credential // for exec.Cmd.SysProcAttr
}

// NewUser adds a user named tfgpu<role><random> with a group of its own
// and home as the home directory in passwd (not made; "" for none). It
// needs root: fatal in CI, a skip elsewhere.
func NewUser(t testing.TB, role string, home func(name string) string) User {
	t.Helper()
	if os.Geteuid() != 0 {
		RequireOrSkip(t, "needs root (useradd)")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := "tfgpu" + role + hex.EncodeToString(b[:])
	dir := "/nonexistent"
	if home != nil {
		dir = home(name)
	}
	if out, err := exec.Command("useradd", "-M", "-U", "-d", dir, "-s", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("userdel", name).Run() })
	id := func(flag string) int {
		out, err := exec.Command("id", flag, name).Output()
		n, cerr := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || cerr != nil || n == 0 {
			t.Fatalf("id %s %s: %v %s", flag, name, err, out)
		}
		return n
	}
	u := User{Name: name, UID: id("-u"), GID: id("-g")}
	u.Cred = &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), NoSetGroups: true}
	return u
}

// SharedCopy copies the file at path (this test binary, say) into a fresh
// directory every user may enter, mode 0755, removed after the test, so
// that another user can run it (go test's build directory is root's
// alone).
func SharedCopy(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := os.MkdirTemp("", "tfgpu-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(d, filepath.Base(path))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}
