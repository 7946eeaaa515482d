package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
	Integration(t)
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
	t.Cleanup(func() { removeUser(t, name) })
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

// removeUser deletes a user NewUser made. userdel refuses a user with a
// live process: a supervisor's watcher, say, that outlives the test's own
// kills by a moment. Every process of that uid is the test's (the user was
// made for it), so what is left after 5 s is SIGKILLed, and userdel tried
// again.
func removeUser(t testing.TB, name string) {
	uid := -1
	if out, err := exec.Command("id", "-u", name).Output(); err == nil {
		uid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("userdel", name).CombinedOutput()
		if err == nil {
			return
		}
		if uid <= 0 || time.Now().After(deadline) {
			t.Errorf("userdel %s: %v: %s", name, err, out)
			return
		}
		if time.Now().Add(time.Second).After(deadline) {
			KillUID(uid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// KillUID SIGKILLs every process owned by uid, a user made for one test
// (NewUser): whatever that user's processes started.
func KillUID(uid int) {
	for _, pid := range Pids() {
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+strconv.Itoa(pid), &st) == nil && int(st.Uid) == uid {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
