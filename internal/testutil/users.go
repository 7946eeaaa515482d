package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
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
	name := userName(role)
	dir := "/nonexistent"
	if home != nil {
		dir = home(name)
	}
	sweepUsersOnce.Do(sweepUsers)
	addUser(t, name, dir, os.Getpid())
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

// userName is tfgpu<role><6 random hex digits>.
func userName(role string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "tfgpu" + role + hex.EncodeToString(b[:])
}

// userMark starts the passwd comment of a user NewUser made; the test
// binary's pid and start time follow.
const userMark = "tfgpu test user of"

var sweepUsersOnce sync.Once

// addUser runs useradd for name, its comment naming the test binary pid.
func addUser(t testing.TB, name, home string, pid int) {
	t.Helper()
	mark := fmt.Sprintf("%s %d %s", userMark, pid, procStart(pid))
	if out, err := exec.Command("useradd", "-M", "-U", "-d", home, "-s", "/usr/sbin/nologin", "-c", mark, name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
}

// sweepUsers removes the users NewUser made for a test binary that died
// before its cleanups ran (killed by go test's -timeout): their comment
// names that binary, and no process with its pid and start time is alive.
// userdel refuses one with a live process: it is left for a later sweep.
func sweepUsers() {
	b, _ := os.ReadFile("/etc/passwd")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		var pid int
		var start string
		if len(f) != 7 || !strings.HasPrefix(f[0], "tfgpu") {
			continue
		}
		if n, _ := fmt.Sscanf(f[4], userMark+" %d %s", &pid, &start); n == 2 && procStart(pid) != start {
			_ = exec.Command("userdel", f[0]).Run()
		}
	}
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
