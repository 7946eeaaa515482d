package rootfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// What root may run or load: root's file in root's directory, and nothing
// another user could change on the way to it, as named or through a link.
func TestCheck(t *testing.T) {
	u := testutil.NewUser(t, "rootfile", nil)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	mk := func(path string, mode os.FileMode, uid int) string {
		testutil.NoErr(t, os.WriteFile(path, []byte("x"), mode))
		os.Chmod(path, mode)
		os.Lchown(path, uid, uid)
		return path
	}
	mkdir := func(path string, mode os.FileMode, uid int) string {
		os.Mkdir(path, mode)
		os.Chmod(path, mode)
		os.Lchown(path, uid, uid)
		return path
	}
	good := mk(filepath.Join(dir, "good"), 0o755, 0)
	users := mk(filepath.Join(dir, "users"), 0o755, u.UID)
	groupW := mk(filepath.Join(dir, "groupw"), 0o775, 0)
	userDir := mkdir(filepath.Join(dir, "udir"), 0o755, u.UID)
	inUsersDir := mk(filepath.Join(userDir, "f"), 0o755, 0)
	openDir := mkdir(filepath.Join(dir, "open"), 0o777, 0)
	inOpenDir := mk(filepath.Join(openDir, "f"), 0o755, 0)
	link := filepath.Join(userDir, "link") // root's target, through a user's directory
	os.Symlink(good, link)
	os.Lchown(link, 0, 0)
	linkToUsers := filepath.Join(dir, "link-to-users")
	os.Symlink(users, linkToUsers)

	if err := Check(good); err != nil {
		t.Errorf("root's file in root's directory: %v", err)
	}
	for _, c := range []struct {
		path string
		uid  int
		at   string
	}{
		{users, u.UID, users},
		{groupW, 0, groupW},
		{inUsersDir, u.UID, userDir},
		{inOpenDir, 0, openDir},
		{link, u.UID, userDir},
		{linkToUsers, u.UID, users},
	} {
		var nr *NotRoots
		if err := Check(c.path); !errors.As(err, &nr) || nr.UID != c.uid || nr.Path != c.at {
			t.Errorf("Check(%s) = %v; want %s refused (uid %d)", c.path, err, c.at, c.uid)
		}
	}
	if err := Check(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file passed")
	}
}

// A mode is told as chmod takes it, with its special bits: a sticky,
// world-writable directory (/tmp) is 1777, not 0777 (#36 item 4).
func TestOctalTellsTheSpecialBits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tmp")
	testutil.NoErr(t, os.Mkdir(dir, 0o755))
	for _, c := range []struct {
		mode os.FileMode
		want string
	}{
		{0o777 | os.ModeSticky, "1777"},
		{0o2775 | os.ModeSetgid, "2775"},
		{0o755, "0755"},
		{0o700 | os.ModeSticky | os.ModeSetgid, "3700"},
	} {
		testutil.NoErr(t, os.Chmod(dir, c.mode))
		fi, err := os.Lstat(dir)
		testutil.NoErr(t, err)
		if got := Octal(fi.Mode()); got != c.want {
			t.Errorf("Octal(%v) = %s, want %s", fi.Mode(), got, c.want)
		}
		if got := (&NotRoots{Path: dir, Mode: modeBits(fi.Mode())}).Error(); fi.Mode().Perm()&0o022 != 0 && !strings.Contains(got, "(mode "+c.want+")") {
			t.Errorf("NotRoots says %q, want mode %s", got, c.want)
		}
	}
}
