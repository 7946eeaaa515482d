//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// A real user who runs Jupyter kernels as a user of a shared machine
// does (issue 32, item 8): made with useradd, with a runtime directory
// (/run/user/UID, as logind makes it), a cgroup v2 subtree and a v1
// memory cgroup delegated to them (what a systemd user session gives;
// doctor is then fully green for them), and the tfgpu kernelspec
// installed into a prefix of theirs with `install --prefix`. Their
// kernels are driven by testdata/e2e/states.py, a real jupyter_client,
// run as them.

// kernelOwner is such a user.
type kernelOwner struct {
	localUser
	bin      string   // the command, where every user can run it
	python   string   // the kernelspec's Python
	env      []string // their environment: for states.py, ps, stop, start, doctor
	cgroupFD int      // their delegated cgroup v2 subtree: every process of theirs starts in it
	memory   string   // their v1 memory cgroup
}

// newKernelOwner makes a user (role names it) whose tfgpu kernelspec runs
// python under bin with the run flags given.
func newKernelOwner(t *testing.T, bin, role, python string, runFlags ...string) *kernelOwner {
	t.Helper()
	becomeSubreaper(t)
	o := &kernelOwner{localUser: newLocalUser(t, role), bin: bin, python: python}
	run := filepath.Join("/run/user", strconv.Itoa(o.uid))
	os.RemoveAll(run) // a uid that was another test's user
	o.mkdir(t, run, 0o700)
	t.Cleanup(func() { os.RemoveAll(run) })
	deleg := delegateCgroup(t, o.localUser)
	fd, err := syscall.Open(deleg, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	testutil.NoErr(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	o.cgroupFD = fd
	o.memory = delegateMemoryV1(t, o.localUser)
	prefix := filepath.Join(o.home, "prefix")
	o.env = userEnv(o.localUser, "XDG_RUNTIME_DIR="+run,
		"JUPYTER_PATH="+filepath.Join(prefix, "share", "jupyter"),
		"JUPYTER_DATA_DIR="+filepath.Join(o.home, "jupyter-data"),
		"JUPYTER_CONFIG_DIR="+filepath.Join(o.home, "jupyter-config"),
		"JUPYTER_RUNTIME_DIR="+filepath.Join(o.home, "jupyter-runtime"),
		"IPYTHONDIR="+filepath.Join(o.home, "ipython"),
		"PYTHONNOUSERSITE=1", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1",
		"PYDEVD_DISABLE_FILE_VALIDATION=1") // Debian's debugpy warns on every start
	args := append([]string{"install", "--prefix", prefix, "--python", python}, runFlags...)
	if code, out := o.run(t, args...); code != 0 {
		t.Fatalf("%s's install (exit %d):\n%s", o.name, code, out)
	}
	return o
}

// delegateMemoryV1 makes a v1 memory cgroup under this process's own and
// hands it to u (the directory and its cgroup.procs and tasks), where
// u's supervisors make their memory cgroups; it is removed after the
// test.
func delegateMemoryV1(t *testing.T, u localUser) string {
	t.Helper()
	l, err := cgroup.DetectLayout()
	testutil.NoErr(t, err)
	parent, err := cgroup.V1SelfDir(l, "memory")
	if err != nil {
		testutil.RequireOrSkip(t, "needs a v1 memory hierarchy: %v", err)
	}
	dir := filepath.Join(parent, "tfgpu-deleg-mem-"+u.name)
	testutil.NoErr(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() {
		for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	for _, p := range []string{dir, dir + "/cgroup.procs", dir + "/tasks"} {
		testutil.NoErr(t, os.Chown(p, u.uid, u.gid))
	}
	return dir
}

// subreaper: the orphans of what the tests start (a standby whose
// supervisor ended) come to this process, which reaps them.
var subreaper sync.Once

func becomeSubreaper(t *testing.T) {
	subreaper.Do(func() {
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, 36, 1, 0); errno != 0 { // PR_SET_CHILD_SUBREAPER
			t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
		}
	})
}

// run runs the command as o, in o's environment and delegated cgroups;
// it returns the exit code and the combined output.
func (o *kernelOwner) run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, stdout, stderr := o.runSplit(t, args...)
	return code, stdout + stderr
}

// runSplit is run with stdout and stderr apart.
func (o *kernelOwner) runSplit(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	argv := o.argv(append([]string{o.bin}, args...))
	return runSplit(t, o.sys(), o.env, argv[0], argv[1:]...)
}

// sys starts a process of o's in o's delegated cgroup v2 subtree (argv
// then makes it o's).
func (o *kernelOwner) sys() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: o.cgroupFD}
}

// argv runs argv as o in o's cgroups: started in the delegated cgroup v2
// subtree (the caller's SysProcAttr), moved into the v1 memory cgroup as
// root, then o (setpriv), so that o's processes are in both from their
// first instruction.
func (o *kernelOwner) argv(argv []string) []string {
	return append([]string{"/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec setpriv --reuid=` + strconv.Itoa(o.uid) +
		` --regid=` + strconv.Itoa(o.gid) + ` --clear-groups -- "$@"`, o.memory}, argv...)
}

// asRoot runs the command as root, with no state directory named: root
// finds every user's kernels from the running processes.
func (o *kernelOwner) asRoot(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runSplit(t, &syscall.SysProcAttr{Setpgid: true}, o.rootEnv(), o.bin, args...)
}

// rootEnv is root's environment for ps, stop, start and doctor: no
// TFGPU_*, no XDG_*, and the owner's kernelspec, so that root's doctor
// finds one (it checks it as root checks any user's: runs nothing of
// theirs).
func (o *kernelOwner) rootEnv() []string {
	var env []string
	for _, kv := range e2eCleanEnv() {
		if !strings.HasPrefix(kv, "XDG_") {
			env = append(env, kv)
		}
	}
	return append(env, "JUPYTER_PATH="+filepath.Join(o.home, "prefix", "share", "jupyter"))
}

// runSplit runs bin with sys and env in "/", under a minute; it returns
// the exit code, stdout and stderr.
func runSplit(t *testing.T, sys *syscall.SysProcAttr, env []string, bin string, args ...string) (int, string, string) {
	t.Helper()
	r := runCommand(sys, env, bin, args...)
	if r.err != nil {
		t.Fatalf("%s %q: %v\n%s%s", bin, args, r.err, r.stdout, r.stderr)
	}
	return r.code, r.stdout, r.stderr
}

// commandResult is how a command ended and what it said.
type commandResult struct {
	code           int
	stdout, stderr string
	err            error // it could not be run, or did not end within a minute
}

// runCommand is runSplit without the test, for a goroutine.
func runCommand(sys *syscall.SysProcAttr, env []string, bin string, args ...string) commandResult {
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir, cmd.SysProcAttr = env, "/", sys
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return commandResult{err: err}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		err = fmt.Errorf("did not end within a minute")
	}
	r := commandResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code, r.err = ee.ExitCode(), nil
	}
	return r
}

// stateDriver is testdata/e2e/states.py run as a kernel's owner: one
// command a line in, one JSON answer a line out.
type stateDriver struct {
	o       *kernelOwner
	id      string // the kernel's id: its connection file is kernel-<id>.json
	tmp     string // E2E_TMP, the owner's
	tag     string // E2E_TAG: every process it starts carries it
	cmd     *exec.Cmd
	in      io.WriteCloser
	answers chan string
	errLog  *testutil.Buffer
}

// driverAnswer is a states.py answer: ok, or the error, and the pids it
// knows.
type driverAnswer struct {
	OK         bool   `json:"ok"`
	Error      string `json:"error"`
	Launched   int    `json:"launched"`   // the process jupyter_client started
	Supervisor int    `json:"supervisor"` // the record's
	Kernel     int    `json:"kernel"`     // the record's, or the cell's for kernel-pid
	Phase      string `json:"phase"`
	Killed     int    `json:"killed"` // kill-supervisor's victim
	Spare      *struct {
		PID        int `json:"pid"`
		StandbyPID int `json:"standby_pid"`
	} `json:"spare"`
	Status string `json:"status"` // execute's
	Stdout string `json:"stdout"`
	Evalue string `json:"evalue"`
}

// startDriver starts states.py as o for the kernel id, in o's cgroups;
// it is ended, and every process it started killed and reaped, when the
// test ends.
func (o *kernelOwner) startDriver(t *testing.T, id string) *stateDriver {
	t.Helper()
	scripts := sharedDir(t)
	for _, name := range []string{"harness.py", "states.py", "gate/sitecustomize.py"} {
		b, err := os.ReadFile(filepath.Join("testdata", "e2e", name))
		testutil.NoErr(t, err)
		os.MkdirAll(filepath.Dir(filepath.Join(scripts, name)), 0o755)
		testutil.NoErr(t, os.WriteFile(filepath.Join(scripts, name), b, 0o644))
	}
	d := &stateDriver{o: o, id: id, tag: e2eTag(t), answers: make(chan string, 1), errLog: &testutil.Buffer{}}
	d.tmp = o.mkdir(t, filepath.Join(o.home, "e2e-"+id[:8]), 0o700)
	argv := o.argv([]string{o.python, filepath.Join(scripts, "states.py")})
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Dir = scripts
	d.cmd.Env = append(append([]string{}, o.env...), "E2E_KERNEL=tfgpu", "E2E_WRAPPED=1", "E2E_KERNEL_ID="+id,
		"E2E_TMP="+d.tmp, "E2E_TAG="+d.tag, "E2E_GATE_PATH="+filepath.Join(scripts, "gate"))
	d.cmd.SysProcAttr = o.sys()
	d.cmd.Stderr = d.errLog
	var err error
	if d.in, err = d.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := d.cmd.StdoutPipe()
	testutil.NoErr(t, err)
	testutil.NoErr(t, d.cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			d.answers <- sc.Text()
		}
		close(d.answers)
	}()
	t.Cleanup(func() { d.end(t) })
	return d
}

// do sends one command and returns its answer; a failed command fails
// the test.
func (d *stateDriver) do(t *testing.T, command string) driverAnswer {
	t.Helper()
	a, err := d.try(command)
	if err != nil {
		t.Fatalf("states.py %s: %v\nstates.py's stderr:\n%s\nthe kernel's log:\n%s", command, err, e2eTail(d.errLog.String(), 4000), e2eTail(d.kernelLog(), 4000))
	}
	return a
}

// try is do, with the failure returned.
func (d *stateDriver) try(command string) (driverAnswer, error) {
	var a driverAnswer
	if _, err := io.WriteString(d.in, command+"\n"); err != nil {
		return a, err
	}
	select {
	case line, ok := <-d.answers:
		if !ok {
			return a, fmt.Errorf("states.py ended")
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			return a, fmt.Errorf("answer %q: %w", line, err)
		}
		if !a.OK {
			return a, fmt.Errorf("%s", a.Error)
		}
		return a, nil
	case <-time.After(3 * time.Minute):
		return a, fmt.Errorf("no answer within 3 minutes")
	}
}

// kernelLog is what the supervisors of the driver's kernel wrote.
func (d *stateDriver) kernelLog() string {
	b, _ := os.ReadFile(filepath.Join(d.tmp, "kernel.log"))
	return string(b)
}

// end closes the driver's stdin (it shuts its kernel down and exits),
// waits for it, then for every process it started to be gone: what is
// left 10 s later is killed, reaped, and a failure.
func (d *stateDriver) end(t *testing.T) {
	d.in.Close()
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		t.Errorf("states.py did not end within a minute of its stdin's end")
	}
	var left []int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if left = e2eAlive(d.tag, nil); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("%d processes of %s's kernel outlived it by 10 s (killed now):\n  %s\nthe kernel's log:\n%s",
			len(left), d.o.name, strings.Join(e2eDescribe(left), "\n  "), e2eTail(d.kernelLog(), 4000))
		e2eKill(left)
	}
	e2eReapOrphans()
}
