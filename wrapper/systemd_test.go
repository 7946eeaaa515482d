package wrapper

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
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// This host runs no systemd, so the "systemd" mode is tested against a
// simulation of the two parts of systemd it uses, faithful to how they
// divide the work on a desktop:
//
//   - The user manager (systemd --user) listens on
//     $XDG_RUNTIME_DIR/systemd/private and, asked for a transient scope,
//     creates its cgroup under user@UID.service/app.slice (a subtree the
//     system manager delegated to the user, so everything in it belongs to
//     the user) and has the caller's process moved into it. The move is done
//     by the system manager as root (AttachProcessesToUnit), because the
//     caller sits in session-N.scope, which belongs to root. fakeUserManager
//     plays both, in the test process (root).
//   - systemd-run --user --scope … -- CMD asks for the scope with its own
//     pid, waits for it, and execs CMD. fakeSystemdRun plays it: the test
//     binary started under the name systemd-run (see TestMain).
//
// The supervisor runs as nobody in a root-owned session-1.scope, so it can
// make no cgroup of its own: exactly the desktop user's situation.

// scopeRequest is what fakeSystemdRun asks the fake manager for.
type scopeRequest struct {
	Unit  string   `json:"unit"`
	PID   int      `json:"pid"`
	Props []string `json:"props"`
}

// fakeSystemdRun accepts the arguments the supervisor passes, refuses
// anything else as systemd-run would, and execs the command in the scope.
func fakeSystemdRun(args []string) int {
	req := scopeRequest{PID: os.Getpid()}
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

// fakeUserManager is the user manager of uid, with its cgroup subtree and
// runtime directory, and the scopes it was asked for.
type fakeUserManager struct {
	session string // root-owned session-1.scope the supervisor starts in
	apps    string // user@UID.service/app.slice, owned by uid
	runtime string // XDG_RUNTIME_DIR
	refuse  string // when set, every request fails with this message

	mu       sync.Mutex
	requests []scopeRequest
}

func startFakeUserManager(t *testing.T, uid int) *fakeUserManager {
	t.Helper()
	parent := requireCgroupV2(t)
	top := filepath.Join(parent, fmt.Sprintf("tfgpu-systemd-test-%d", os.Getpid()))
	m := &fakeUserManager{
		session: filepath.Join(top, "user-65534.slice", "session-1.scope"),
		apps:    filepath.Join(top, "user-65534.slice", "user@65534.service", "app.slice"),
		runtime: t.TempDir(),
	}
	for _, d := range []string{m.session, m.apps} {
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
	chownTree(t, filepath.Dir(m.apps), uid)

	// logind makes /run/user/UID, owned by the user, 0700; the manager's
	// socket directory in it is the user's too.
	if err := os.Chown(m.runtime, uid, uid); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(m.runtime, "systemd", "private")
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
			go m.serve(c.(*net.UnixConn), uid)
		}
	}()
	return m
}

func (m *fakeUserManager) serve(c *net.UnixConn, uid int) {
	defer c.Close()
	var req scopeRequest
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		return
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	refuse := m.refuse
	m.mu.Unlock()
	answer := "ok\n"
	if err := m.makeScope(c, req, uid, refuse); err != nil {
		answer = err.Error() + "\n"
	}
	c.Write([]byte(answer))
}

// makeScope does what the two managers do for StartTransientUnit of a
// scope with Delegate=yes: check the caller, create the cgroup (the user
// manager, as the user), move the pid in (the system manager, as root).
func (m *fakeUserManager) makeScope(c *net.UnixConn, req scopeRequest, uid int, refuse string) error {
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
	if int(cred.Uid) != uid || int(cred.Pid) != req.PID {
		return fmt.Errorf("access denied: caller uid %d pid %d", cred.Uid, cred.Pid)
	}
	if !strings.HasSuffix(req.Unit, ".scope") || strings.ContainsRune(req.Unit, '/') {
		return fmt.Errorf("invalid unit name %q", req.Unit)
	}
	dir := filepath.Join(m.apps, req.Unit)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("unit %s already exists", req.Unit)
	}
	if err := chownDir(dir, uid); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(req.PID)), 0)
}

func (m *fakeUserManager) asked() []scopeRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]scopeRequest(nil), m.requests...)
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
func chownTree(t *testing.T, dir string, uid int) {
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

// startInSession starts the supervisor as nobody in the session scope, with
// the fake systemd-run first on PATH and the user manager's runtime
// directory, and returns it with the kernel's pid.
func (m *fakeUserManager) startInSession(t *testing.T, env ...string) (*harness, *exec.Cmd) {
	t.Helper()
	h := newHarness(t, "")
	exe := copyForUser(t, os.Args[0], nobody, h)
	bin := filepath.Join(filepath.Dir(exe), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(bin, "systemd-run")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(m.session, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Dir = filepath.Dir(exe) // userCwd
	cmd.Env = append(os.Environ(), "TFGPU_TEST_SUPERVISOR="+h.path, "TFGPU_CGROUP=auto",
		"XDG_RUNTIME_DIR="+m.runtime, "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = h.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: nobody, Gid: nobody},
		UseCgroupFD: true, CgroupFD: fd,
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		h.closeClients()
	})
	h.connect()
	return h, cmd
}

// A desktop user whose own cgroup is not writable gets a delegated scope
// from the systemd user manager; the scope is the kernel's tree, and stop
// kills all of it, escapees included, and leaves no cgroup behind.
func TestSystemdScopeForUserWithoutWritableCgroup(t *testing.T) {
	m := startFakeUserManager(t, nobody)
	h, cmd := m.startInSession(t, "TFGPU_MEMORY_LIMIT=300M")
	log := h.stderr.String()
	if !strings.Contains(log, "mode=systemd") || !strings.Contains(log, "own cgroup not usable") {
		t.Fatalf("not in a systemd scope, or not said why; log:\n%s", log)
	}
	t.Logf("supervisor log:\n%s", log)
	reqs := m.asked()
	if len(reqs) != 1 {
		t.Fatalf("scopes asked for: %+v", reqs)
	}
	props := strings.Join(reqs[0].Props, " ")
	if !strings.Contains(props, "Delegate=yes") || !strings.Contains(props, "MemoryMax=314572800") {
		t.Fatalf("scope properties %q: want Delegate=yes and MemoryMax of 300M", props)
	}
	scope := filepath.Join(m.apps, reqs[0].Unit)
	kernelPID := reqs[0].PID
	if got := procCgroup(t, kernelPID); !strings.HasSuffix(scope, got) {
		t.Fatalf("kernel %d is in %s, not in the scope %s", kernelPID, got, scope)
	}
	pid := h.spawnEscapee()
	if got := procCgroup(t, pid); !strings.HasSuffix(scope, got) {
		t.Fatalf("escapee %d is in %s, not in the scope %s", pid, got, scope)
	}
	h.stopAndCheck(cmd, pid)
	if pidAlive(kernelPID) {
		t.Fatalf("kernel %d survived", kernelPID)
	}
	if _, err := os.Stat(scope); !os.IsNotExist(err) {
		t.Fatalf("scope cgroup %s left behind: %v", scope, err)
	}
}

// When the user manager refuses the scope, the kernel starts anyway (here
// under the proc tree, nothing else being writable for nobody), the log
// says why, and the tree is still killed on stop.
func TestSystemdScopeRefusedFallsBack(t *testing.T) {
	m := startFakeUserManager(t, nobody)
	m.mu.Lock()
	m.refuse = "Unit tfgpu.scope was already loaded or has a fragment file."
	m.mu.Unlock()
	h, cmd := m.startInSession(t)
	log := h.stderr.String()
	if !strings.Contains(log, "no systemd scope for the kernel") || !strings.Contains(log, "mode=proc") ||
		!strings.Contains(log, "already loaded") {
		t.Fatalf("no fallback from the refused scope, or not said why; log:\n%s", log)
	}
	pid := h.spawnEscapee()
	h.stopAndCheck(cmd, pid)
}

// procCgroup is pid's cgroup2 path, relative to the cgroup2 mount.
func procCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	t.Fatalf("pid %d has no cgroup2 line in %q", pid, b)
	return ""
}

// A supervisor in the systemd scope mode that is SIGKILLed: its watcher
// kills the scope's tree and removes the scope's cgroup at once, as in the
// other modes (the user is nobody, as above).
func TestSystemdScopeWatcherFinishesAKilledSupervisor(t *testing.T) {
	m := startFakeUserManager(t, nobody)
	h, cmd := m.startInSession(t)
	reqs := m.asked()
	if len(reqs) != 1 {
		t.Fatalf("scopes asked for: %+v", reqs)
	}
	scope := filepath.Join(m.apps, reqs[0].Unit)
	pid := h.spawnEscapee()
	took := h.killSupervisor(cmd, pid)
	if _, err := os.Stat(scope); !os.IsNotExist(err) {
		t.Fatalf("scope cgroup %s left behind: %v", scope, err)
	}
	t.Logf("tree dead and scope removed %v after the SIGKILL", took.Round(time.Millisecond))
}
