// Package fakesystemd lets tests on a host without systemd run the
// "systemd" containment mode (cgroup's scopeTree) against a simulation of
// the two parts of systemd it uses, faithful to how they divide the work on
// a desktop. Only tests import it (cgroup's TestTreeContract, wrapper's
// TestSystemd*):
//
//   - The user manager (systemd --user) listens on
//     $XDG_RUNTIME_DIR/systemd/private and, asked for a transient scope,
//     creates its cgroup under user@UID.service/app.slice (a subtree the
//     system manager delegated to the user, so everything in it belongs to
//     the user) and has the caller's process moved into it. The move is done
//     by the system manager as root (AttachProcessesToUnit), because the
//     caller sits in session-N.scope, which belongs to root. Manager
//     (Start) plays both, in the test process (root), in the real cgroup2
//     tree.
//   - systemd-run --user --scope … -- CMD asks for the scope with its own
//     pid, waits for it, and execs CMD. Run plays it: the test binary
//     started under the name systemd-run (Bin makes one, Main is the
//     dispatch at the top of the package's TestMain).
package fakesystemd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Command is the name the test binary plays systemd-run under.
const Command = "systemd-run"

// Main runs Run and exits when the test binary was started as systemd-run
// (through Bin's link); otherwise it returns. Call it first in TestMain,
// before any other dispatch on the environment, which systemd-run's process
// inherits from the supervisor.
func Main() {
	if filepath.Base(os.Args[0]) == Command {
		os.Exit(Run(os.Args[1:]))
	}
}

// Bin makes dir/bin with a systemd-run in it that is exe (a symlink), and
// returns the directory, to put first on PATH.
func Bin(t testing.TB, dir, exe string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(bin, Command)); err != nil {
		t.Fatal(err)
	}
	return bin
}

// ScopeRequest is what Run asks the fake manager for.
type ScopeRequest struct {
	Unit  string   `json:"unit"`
	PID   int      `json:"pid"`
	Props []string `json:"props"`
}

// Run accepts the arguments the supervisor passes, refuses anything else
// as systemd-run would, and execs the command in the scope.
func Run(args []string) int {
	req := ScopeRequest{PID: os.Getpid()}
	var user, scope bool
	for len(args) > 0 && args[0] != "--" {
		a := args[0]
		args = args[1:]
		switch {
		case a == "--user":
			user = true
		case a == "--scope":
			scope = true
		case a == "--quiet" || a == "--collect":
		case strings.HasPrefix(a, "--unit="):
			req.Unit = strings.TrimPrefix(a, "--unit=")
		case strings.HasPrefix(a, "--description="):
		case a == "-p" && len(args) > 0:
			req.Props = append(req.Props, args[0])
			args = args[1:]
		default:
			fmt.Fprintf(os.Stderr, "systemd-run: unrecognized option '%s'\n", a)
			return 1
		}
	}
	if !user || !scope || len(args) < 2 || req.Unit == "" {
		fmt.Fprintln(os.Stderr, "systemd-run: want --user --scope --unit=NAME -- CMD")
		return 1
	}
	cmd := args[1:]
	c, err := net.Dial("unix", filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "systemd", "private"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "Failed to connect to bus: %v\n", err)
		return 1
	}
	json.NewEncoder(c).Encode(req)
	answer, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if answer != "ok\n" {
		fmt.Fprintf(os.Stderr, "Failed to start transient scope unit: %s", answer)
		return 1
	}
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "Failed to execute %s: %v\n", cmd[0], err)
		return 1
	}
	err = syscall.Exec(path, cmd, os.Environ())
	fmt.Fprintf(os.Stderr, "Failed to execute %s: %v\n", path, err)
	return 1
}

// Manager is the user manager of a uid, with its cgroup subtree and
// runtime directory, and the scopes it was asked for.
type Manager struct {
	// Session is a root-owned user-UID.slice/session-1.scope a supervisor
	// may be started in (a desktop user's process cannot make a cgroup
	// there).
	Session string
	// Apps is user@UID.service/app.slice, owned by uid, where the scopes
	// are made: scope UNIT is Apps/UNIT.
	Apps string
	// Runtime is the user's XDG_RUNTIME_DIR, with the manager's socket.
	Runtime string

	uid int

	mu       sync.Mutex
	refuse   string // when set, every request fails with this message
	requests []ScopeRequest
}

var seq atomic.Int64

// Start starts the user manager of uid, its slices made in a cgroup of its
// own under parent (a writable cgroup2 directory), until the test ends;
// then the cgroups it made, empty by then, are removed.
func Start(t testing.TB, parent string, uid int) *Manager {
	t.Helper()
	top := filepath.Join(parent, fmt.Sprintf("tfgpu-systemd-test-%d-%d", os.Getpid(), seq.Add(1)))
	slice := filepath.Join(top, fmt.Sprintf("user-%d.slice", uid))
	m := &Manager{
		Session: filepath.Join(slice, "session-1.scope"),
		Apps:    filepath.Join(slice, fmt.Sprintf("user@%d.service", uid), "app.slice"),
		uid:     uid,
	}
	// A short path of its own, not t.TempDir (named after the test): the
	// socket's path must fit a sockaddr_un (108 bytes).
	rt, err := os.MkdirTemp("", "fakesystemd-")
	if err != nil {
		t.Fatal(err)
	}
	m.Runtime = rt
	t.Cleanup(func() { os.RemoveAll(rt) })
	for _, d := range []string{m.Session, m.Apps} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// Whatever is left is empty by now (the test killed its processes);
		// retry while the kernel notes the last exits.
		for i := 0; i < 100 && removeDirs(top) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		if err := removeDirs(top); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	// The system manager delegates user@UID.service to the user.
	chownTree(t, filepath.Dir(m.Apps), uid)

	// logind makes /run/user/UID, owned by the user, 0700; the manager's
	// socket directory in it is the user's too.
	if err := os.Chown(m.Runtime, uid, uid); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(m.Runtime, "systemd", "private")
	if err := os.Mkdir(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go m.serve(c.(*net.UnixConn))
		}
	}()
	return m
}

// Refuse makes every later request fail with msg, as systemd's error.
func (m *Manager) Refuse(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refuse = msg
}

// Asked returns the scopes asked for so far.
func (m *Manager) Asked() []ScopeRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ScopeRequest(nil), m.requests...)
}

func (m *Manager) serve(c *net.UnixConn) {
	defer c.Close()
	var req ScopeRequest
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		return
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	refuse := m.refuse
	m.mu.Unlock()
	answer := "ok\n"
	if err := m.makeScope(c, req, refuse); err != nil {
		answer = err.Error() + "\n"
	}
	c.Write([]byte(answer))
}

// makeScope does what the two managers do for StartTransientUnit of a
// scope with Delegate=yes: check the caller, create the cgroup (the user
// manager, as the user), move the pid in (the system manager, as root).
func (m *Manager) makeScope(c *net.UnixConn, req ScopeRequest, refuse string) error {
	if refuse != "" {
		return fmt.Errorf("%s", refuse)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		return err
	}
	if int(cred.Uid) != m.uid || int(cred.Pid) != req.PID {
		return fmt.Errorf("access denied: caller uid %d pid %d", cred.Uid, cred.Pid)
	}
	if !strings.HasSuffix(req.Unit, ".scope") || strings.ContainsRune(req.Unit, '/') {
		return fmt.Errorf("invalid unit name %q", req.Unit)
	}
	dir := filepath.Join(m.Apps, req.Unit)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("unit %s already exists", req.Unit)
	}
	if err := chownDir(dir, m.uid); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(req.PID)), 0)
}

// removeDirs removes the cgroup dir and those below it, deepest first.
func removeDirs(dir string) error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// chownTree hands every directory from dir down, and the files in them, to
// uid.
func chownTree(t testing.TB, dir string, uid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return chownDir(p, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// chownDir hands a cgroup directory and its interface files to uid.
func chownDir(dir string, uid int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			if err := os.Chown(filepath.Join(dir, e.Name()), uid, uid); err != nil {
				return err
			}
		}
	}
	return os.Chown(dir, uid, uid)
}
