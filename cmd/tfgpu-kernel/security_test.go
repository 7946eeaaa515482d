//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Issue 10: two users of one machine (alice runs kernels, bob is another
// local user) and root, made for real with useradd. Each attack is its own
// test: the victim's processes are alive and files intact afterwards, and
// a line says what was refused.

// localUser is a user made for one test and removed after it.
type localUser struct {
	name       string
	uid, gid   int
	home       string
	credential *syscall.Credential
}

func newLocalUser(t *testing.T, role string) localUser {
	t.Helper()
	testutil.Integration(t)
	shared := sharedDir(t)
	u := testutil.NewUser(t, role, func(name string) string { return filepath.Join(shared, name) })
	home := filepath.Join(shared, u.Name)
	testutil.NoErr(t, os.Mkdir(home, 0o700))
	testutil.NoErr(t, os.Chown(home, u.UID, u.GID))
	return localUser{name: u.Name, uid: u.UID, gid: u.GID, home: home, credential: u.Cred}
}

// sharedDir is a directory every user may enter (t.TempDir's are root's
// alone), removed after the test.
func sharedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tfgpu-users-")
	testutil.NoErr(t, err)
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// sharedBinary is the built command where every user can run it.
func sharedBinary(t *testing.T) string {
	t.Helper()
	src := buildInstallTestBinary(t)
	b, err := os.ReadFile(src)
	testutil.NoErr(t, err)
	dst := filepath.Join(sharedDir(t), "tfgpu-kernel")
	testutil.NoErr(t, os.WriteFile(dst, b, 0o755))
	return dst
}

// own writes content to path as u's file (mode) and returns path.
func (u localUser) own(t *testing.T, path string, content []byte, mode os.FileMode) string {
	t.Helper()
	testutil.NoErr(t, os.WriteFile(path, content, mode))
	os.Chmod(path, mode)
	testutil.NoErr(t, os.Lchown(path, u.uid, u.gid))
	return path
}

// mkdir makes dir (mode) as u's.
func (u localUser) mkdir(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	testutil.NoErr(t, os.MkdirAll(dir, mode))
	os.Chmod(dir, mode)
	testutil.NoErr(t, os.Chown(dir, u.uid, u.gid))
	return dir
}

// sleeper starts a process that is the victim of an attack: a process
// group of its own, run as cred (nil: root); killed at cleanup.
func sleeper(t *testing.T, cred *syscall.Credential) (int, uint64) {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	testutil.NoErr(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	start, err := proc.StartTime(cmd.Process.Pid)
	testutil.NoErr(t, err)
	return cmd.Process.Pid, start
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func recordJSON(t *testing.T, st record.State) []byte {
	t.Helper()
	b, err := json.Marshal(st)
	testutil.NoErr(t, err)
	return b
}

// runAs runs the command as cred with env, in "/"; it returns the exit
// code and the combined output.
func runAs(t *testing.T, cred *syscall.Credential, env []string, timeout time.Duration, bin string, args ...string) (int, string) {
	t.Helper()
	return runAsIn(t, cred, "/", env, timeout, bin, args...)
}

// runAsIn is runAs in the working directory dir.
func runAsIn(t *testing.T, cred *syscall.Credential, dir string, env []string, timeout time.Duration, bin string, args ...string) (int, string) {
	t.Helper()
	return runWith(t, &syscall.SysProcAttr{Credential: cred, Setpgid: true}, dir, env, timeout, bin, args...)
}

// runWith is runAsIn with the process's attributes given whole (a cgroup
// to start in, too); sys must set Setpgid.
func runWith(t *testing.T, sys *syscall.SysProcAttr, dir string, env []string, timeout time.Duration, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = sys
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", bin, args, err, out.String())
	}
	return 0, out.String()
}

// userEnv is a clean environment for u: HOME, no runtime dir, no state
// directory of the test runner's.
func userEnv(u localUser, extra ...string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + u.home, "USER=" + u.name, "LANG=C.UTF-8"}
	return append(env, extra...)
}

// connFileFor writes a connection file u owns, in u's home.
func connFileFor(t *testing.T, u localUser) string {
	t.Helper()
	path := writeTCPConn(t, u.home, "5b2c1e7a-aaaa-4bbb-8ccc-000000000001", "security-test-key")
	os.Lchown(path, u.uid, u.gid)
	return path
}

// The state directory: never a path someone else could make first, and
// one that is not the user's own is refused with one line (exit 2) before
// anything runs.
func TestSecurityStateDirectory(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	// bob makes what used to be alice's default (no XDG_RUNTIME_DIR) and a
	// runtime directory for her, world-writable, first.
	oldDefault := bob.mkdir(t, filepath.Join(os.TempDir(), fmt.Sprintf("tfgpu-kernel-%d", alice.uid)), 0o777)
	t.Cleanup(func() { os.RemoveAll(oldDefault) })
	bobsRuntime := bob.mkdir(t, filepath.Join(sharedDir(t), "run"), 0o777)

	// doctor says where alice's state lives: in her home, not in bob's dirs.
	code, out := runAs(t, alice.credential, userEnv(alice, "XDG_RUNTIME_DIR="+bobsRuntime), 60*time.Second, bin, "doctor")
	want := filepath.Join(alice.home, ".local", "state", "tfgpu-kernel")
	if !strings.Contains(out, "state in "+want+"/") {
		t.Fatalf("doctor (exit %d) does not put alice's state under %s:\n%s", code, want, out)
	}
	if ents, _ := os.ReadDir(oldDefault); len(ents) > 0 {
		t.Fatalf("something was written into bob's directory: %v", ents)
	}

	conn := connFileFor(t, alice)
	shared := alice.mkdir(t, filepath.Join(sharedDir(t), "alices-state"), 0o700)
	for _, tc := range []struct {
		name, dir, want string
		as              localUser
	}{
		{"bob's directory, world-writable", oldDefault, "belongs to uid " + strconv.Itoa(bob.uid), alice},
		{"alice's own, but open to all", alice.mkdir(t, filepath.Join(alice.home, "open"), 0o777), "it must be 0700", alice},
		{"a link bob made to alice's own", func() string {
			l := filepath.Join(bobsRuntime, "link")
			os.Symlink(shared, l)
			os.Lchown(l, bob.uid, bob.gid)
			return l
		}(), "is a link", alice},
		{"one directory in a shared kernelspec's env", shared, "belongs to uid " + strconv.Itoa(alice.uid), bob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conn
			if tc.as.uid == bob.uid {
				c = connFileFor(t, bob)
			}
			start := time.Now()
			code, out := runAs(t, tc.as.credential, userEnv(tc.as, "TFGPU_STATE_DIR="+tc.dir), 30*time.Second,
				bin, "run", "-f", c, "--", "/bin/sleep", "600")
			out = strings.TrimSpace(out)
			t.Logf("exit %d in %v: %s", code, time.Since(start).Round(time.Millisecond), out)
			if code != 2 || strings.Contains(out, "\n") || !strings.Contains(out, tc.want) || !strings.Contains(out, tc.dir) {
				t.Fatalf("want exit 2 and one line naming %s and %q; got exit %d:\n%s", tc.dir, tc.want, code, out)
			}
		})
	}
}

// Records in alice's own state directory that she did not write (bob's
// files, from before the directory was locked down) or that name what her
// supervisors never make are not acted on: one attack per subtest, each
// planted before alice's supervisor starts (it finishes the records of
// dead supervisors first); her supervisor logs a line for each and starts
// her kernel.
func TestSecurityPlantedRecords(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	dead := 1 << 30 // a supervisor pid that does not exist
	for _, tc := range []struct {
		name string
		// plant writes the attack into state and returns the line that
		// must say it was refused, and a check that the victim is intact.
		plant func(t *testing.T, state, bobs string) (refusal string, intact func() error)
	}{
		{"bob's record naming alice's process", func(t *testing.T, state, _ string) (string, func() error) {
			pid, start := sleeper(t, alice.credential)
			bob.own(t, filepath.Join(state, "k-unrelated.json"), recordJSON(t, record.State{KernelID: "k-unrelated",
				SupervisorPID: dead, KernelPID: pid, KernelStart: start, Containment: "proc"}), 0o644)
			return "k-unrelated.json: owned by uid " + strconv.Itoa(bob.uid), func() error { return aliveErr(pid) }
		}},
		{"a kernel id that climbs out", func(t *testing.T, state, _ string) (string, func() error) {
			victim := alice.own(t, filepath.Join(filepath.Dir(state), "victim.json"), []byte("{}\n"), 0o600)
			alice.own(t, filepath.Join(state, "x.json"), recordJSON(t, record.State{KernelID: "../victim", SupervisorPID: dead}), 0o600)
			return `x.json: kernel id \"../victim\"`, func() error { _, err := os.Stat(victim); return err }
		}},
		{"an inner directory that is alice's work", func(t *testing.T, state, _ string) (string, func() error) {
			precious := alice.mkdir(t, filepath.Join(alice.home, "precious"), 0o700)
			thesis := alice.own(t, filepath.Join(precious, "thesis.tex"), []byte("\\documentclass{article}\n"), 0o600)
			alice.own(t, filepath.Join(state, "k-inner.json"), recordJSON(t, record.State{KernelID: "k-inner", SupervisorPID: dead,
				Containment: "proc", InnerDir: precious}), 0o600)
			return "inner directory " + precious + " is not named as", func() error { _, err := os.Stat(thesis); return err }
		}},
		{"a cgroup.kill that links to alice's file", func(t *testing.T, state, bobs string) (string, func() error) {
			notes := alice.own(t, filepath.Join(alice.home, "notes.txt"), []byte("alice's notes\n"), 0o600)
			fake := bob.mkdir(t, filepath.Join(bobs, "tfgpu-k-link-"+strconv.Itoa(dead)), 0o755)
			os.Symlink(notes, filepath.Join(fake, "cgroup.kill"))
			os.WriteFile(filepath.Join(fake, "cgroup.events"), []byte("populated 1\n"), 0o644)
			alice.own(t, filepath.Join(state, "k-link.json"), recordJSON(t, record.State{KernelID: "k-link", SupervisorPID: dead,
				Containment: "v2", Cgroup: fake}), 0o600)
			return "cgroup " + fake + " is not on a cgroup file system", func() error {
				if b, _ := os.ReadFile(notes); string(b) != "alice's notes\n" {
					return fmt.Errorf("alice's notes were written: %q", b)
				}
				return nil
			}
		}},
		{"thirty populated cgroups that never empty", func(t *testing.T, state, bobs string) (string, func() error) {
			for i := range 30 {
				id := fmt.Sprintf("k-stuck-%d", i)
				dir := bob.mkdir(t, filepath.Join(bobs, "tfgpu-"+id+"-"+strconv.Itoa(dead)), 0o755)
				os.WriteFile(filepath.Join(dir, "cgroup.events"), []byte("populated 1\n"), 0o644)
				alice.own(t, filepath.Join(state, id+".json"), recordJSON(t, record.State{KernelID: id, SupervisorPID: dead,
					Containment: "v2", Cgroup: dir}), 0o600)
			}
			return "k-stuck-29-" + strconv.Itoa(dead) + " is not on a cgroup file system", func() error { return nil }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := alice.mkdir(t, filepath.Join(alice.home, "state-"+strings.ReplaceAll(tc.name, " ", "-")), 0o700)
			bobs := bob.mkdir(t, filepath.Join(sharedDir(t), "bob"), 0o755)
			refusal, intact := tc.plant(t, state, bobs)
			out, started := runSupervisorAs(t, bin, alice, state)
			t.Logf("alice's kernel started after %v", started.Round(time.Millisecond))
			if !strings.Contains(out, "kernel started") {
				t.Fatalf("alice's kernel never started:\n%s", out)
			}
			if err := intact(); err != nil {
				t.Errorf("the victim was hurt: %v", err)
			}
			if !strings.Contains(out, refusal) {
				t.Errorf("no line saying %q was refused:\n%s", refusal, out)
			}
			if strings.Contains(out, "cannot finish") {
				t.Errorf("the supervisor tried to finish a planted kernel:\n%s", out)
			}
		})
	}
}

func aliveErr(pid int) error {
	if !alive(pid) {
		return fmt.Errorf("process %d was killed", pid)
	}
	return nil
}

// runSupervisorAs runs `tfgpu-kernel run` as u with state as its state
// directory and /bin/sleep as the kernel, until the kernel started (or the
// supervisor exited), then stops it with SIGTERM; it returns the log and
// how long the start took.
func runSupervisorAs(t *testing.T, bin string, u localUser, state string) (string, time.Duration) {
	t.Helper()
	conn := connFileFor(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--cgroup", "proc", "-f", conn, "--", "/bin/sleep", "600")
	cmd.Env = userEnv(u, "TFGPU_STATE_DIR="+state)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.credential, Setpgid: true}
	var log testutil.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	testutil.NoErr(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var werr error
	gone := false
wait:
	for !strings.Contains(log.String(), "kernel started") {
		select {
		case werr = <-exited:
			gone = true
			break wait
		case <-time.After(20 * time.Millisecond):
		}
	}
	took := time.Since(start)
	if !gone {
		cmd.Process.Signal(syscall.SIGTERM)
		werr = <-exited
	}
	if werr != nil {
		t.Logf("supervisor: %v", werr)
	}
	return log.String(), took
}

// Root acting on a user's records (stop, ps across users) acts only on
// processes, cgroups and paths that user owns; it prints, never obeys,
// what the user wrote.
func TestSecurityRootActsOnlyOnTheUsersOwn(t *testing.T) {
	bin := sharedBinary(t)
	bob := newLocalUser(t, "bob")
	parent := cgroupV2Parent(t)
	bobsState := bob.mkdir(t, filepath.Join(bob.home, "state"), 0o700)
	bobs := bob.mkdir(t, filepath.Join(sharedDir(t), "bob"), 0o755)
	rootPid, rootStart := sleeper(t, nil)
	rootFile := filepath.Join(t.TempDir(), "shadow")
	os.WriteFile(rootFile, []byte("root:secret-hash:19000\n"), 0o600)
	rootDir := filepath.Join(os.TempDir(), "tfgpu-k-inner-424242")
	os.Mkdir(rootDir, 0o700)
	os.WriteFile(filepath.Join(rootDir, "keep"), []byte("x"), 0o600)
	t.Cleanup(func() { os.RemoveAll(rootDir) })
	rootCg := filepath.Join(parent, "tfgpu-k-cg-1073741824")
	testutil.NoErr(t, os.Mkdir(rootCg, 0o755))
	cgPid, _ := sleeper(t, nil)
	os.WriteFile(filepath.Join(rootCg, "cgroup.procs"), []byte(strconv.Itoa(cgPid)), 0o644)
	t.Cleanup(func() {
		syscall.Kill(cgPid, syscall.SIGKILL)
		for i := 0; i < 100 && os.Remove(rootCg) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	})
	linkCg := bob.mkdir(t, filepath.Join(bobs, "tfgpu-k-link-1073741824"), 0o755)
	os.Symlink(rootFile, filepath.Join(linkCg, "cgroup.kill"))
	os.Symlink(rootFile, filepath.Join(linkCg, "cgroup.procs"))
	for _, st := range []record.State{
		{KernelID: "k-proc", SupervisorPID: 1 << 30, KernelPID: rootPid, KernelStart: rootStart, Containment: "proc"},
		{KernelID: "k-cg", SupervisorPID: 1 << 30, Containment: "v2", Cgroup: rootCg},
		{KernelID: "k-inner", SupervisorPID: 1 << 30, Containment: "proc", InnerDir: rootDir},
		{KernelID: "k-link", SupervisorPID: 1 << 30, Containment: "v2", Cgroup: linkCg,
			Session: "nb.ipynb\x1b]0;owned\x07\x1b[2J",
			// What --gpus auto chose, as bob's record says: shown, never obeyed.
			Placement: &record.Placement{Asked: "auto\x1b[2J", Visible: "GPU-1\x07", Why: "\x1b]0;owned\x07",
				GPUs: []gpu.Unit{{Device: 1, UUID: "GPU-\x1b[31m", Name: "H200\x1b]0;owned\x07"}}}},
	} {
		bob.own(t, filepath.Join(bobsState, st.KernelID+".json"), recordJSON(t, st), 0o600)
	}
	env := append(os.Environ(), "TFGPU_STATE_DIR=")
	code, ps := runAs(t, nil, env, 60*time.Second, bin, "ps", "--state-dir", bobsState)
	if strings.ContainsRune(ps, 0x1b) || strings.ContainsRune(ps, 0x07) || strings.Contains(ps, "secret-hash") {
		t.Fatalf("root's ps printed what bob wrote or read through his link (exit %d):\n%q", code, ps)
	}
	if !strings.Contains(ps, "k-link on GPU1 (--gpus auto?[2J: ") {
		t.Errorf("root's ps does not show bob's placement, made printable:\n%s", ps)
	}
	_, psJSON := runAs(t, nil, env, 60*time.Second, bin, "ps", "--json", "--state-dir", bobsState)
	if strings.Contains(psJSON, `\u001b`) || strings.Contains(psJSON, `\u0007`) || !strings.Contains(psJSON, `"placement"`) {
		t.Errorf("root's ps --json passes on bob's control characters, or no placement:\n%s", psJSON)
	}
	code, out := runAs(t, nil, env, 60*time.Second, bin, "stop", "--state-dir", bobsState, "--all")
	t.Logf("ps:\n%s\nstop --all (exit %d):\n%s", ps, code, out)
	if !alive(rootPid) || !alive(cgPid) {
		t.Fatal("root's processes were killed through bob's records")
	}
	if b, _ := os.ReadFile(rootFile); string(b) != "root:secret-hash:19000\n" {
		t.Fatalf("root's file was written: %q", b)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "keep")); err != nil {
		t.Fatalf("root's directory was removed: %v", err)
	}
	if _, err := os.Stat(rootCg); err != nil {
		t.Fatalf("root's cgroup was removed: %v", err)
	}
	for _, want := range []string{
		"kernel pid " + strconv.Itoa(rootPid) + " belongs to uid 0, not to the record's owner " + strconv.Itoa(bob.uid),
		"cgroup " + rootCg + " belongs to uid 0",
		"inner directory " + rootDir + " belongs to uid 0",
		"cgroup " + linkCg + " is not on a cgroup file system",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stop does not say it refused: %q", want)
		}
	}
	if code == 0 {
		t.Error("stop exited 0 after refusing every kernel")
	}

	// Root finds a user's kernel by id, as ps lists it, in the user's
	// runtime directory, and stops what the user owns.
	run := filepath.Join("/run/user", strconv.Itoa(bob.uid))
	bob.mkdir(t, run, 0o700)
	t.Cleanup(func() { os.RemoveAll(run) })
	runState := bob.mkdir(t, filepath.Join(run, "tfgpu-kernel"), 0o700)
	bobPid, bobStart := sleeper(t, bob.credential)
	bob.own(t, filepath.Join(runState, "k-bobs.json"), recordJSON(t, record.State{KernelID: "k-bobs", SupervisorPID: 1 << 30,
		KernelPID: bobPid, KernelStart: bobStart, Containment: "proc"}), 0o600)
	code, out = runAs(t, nil, env, 60*time.Second, bin, "stop", "k-bobs")
	for i := 0; i < 100 && alive(bobPid); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if code != 0 || alive(bobPid) || !strings.Contains(out, "stopped kernel "+bob.name+":k-bobs") {
		t.Fatalf("root's stop k-bobs: exit %d, bob's kernel alive %v:\n%s", code, alive(bobPid), out)
	}
}

// A supervisor running as root loads an NVML library only from a file of
// root's that no one else can write.
func TestSecurityRootLoadsOnlyRootsNVML(t *testing.T) {
	bin := sharedBinary(t)
	bob := newLocalUser(t, "bob")
	f := gputest.New(t, 1, gputest.Full)
	lib, err := os.ReadFile(f.Library())
	testutil.NoErr(t, err)
	bobs := bob.mkdir(t, filepath.Join(sharedDir(t), "lib"), 0o755)
	bobsLib := bob.own(t, filepath.Join(bobs, "libnvidia-ml.so.1"), lib, 0o755)
	roots := filepath.Join(sharedDir(t), "rootlib")
	os.Mkdir(roots, 0o755)
	rootsLib := filepath.Join(roots, "libnvidia-ml.so.1")
	os.WriteFile(rootsLib, lib, 0o755)
	env := append(append(os.Environ(), "TFGPU_STATE_DIR="+testutil.PrivateDir(t)), f.Env()...)
	_, out := runAs(t, nil, env, 60*time.Second, bin, "doctor", "--nvml-library", bobsLib)
	if !strings.Contains(out, "refusing to load it as root") || !strings.Contains(out, "belongs to uid "+strconv.Itoa(bob.uid)) {
		t.Fatalf("doctor as root loaded bob's library:\n%s", out)
	}
	_, out = runAs(t, nil, env, 60*time.Second, bin, "doctor", "--nvml-library", rootsLib)
	if !strings.Contains(out, "driver 999.99-fake") {
		t.Fatalf("doctor as root did not load root's library:\n%s", out)
	}
	os.Chmod(rootsLib, 0o777)
	_, out = runAs(t, nil, env, 60*time.Second, bin, "doctor", "--nvml-library", rootsLib)
	if !strings.Contains(out, "refusing to load it as root") {
		t.Fatalf("doctor as root loaded a world-writable library:\n%s", out)
	}
}

// cgroupV2Parent is this process's own cgroup2 directory, where root may
// make a cgroup.
func cgroupV2Parent(t *testing.T) string {
	t.Helper()
	testutil.Integration(t)
	l, err := cgroup.DetectLayout()
	if err != nil || l.V2Self == "" {
		testutil.RequireOrSkip(t, "needs cgroup v2: %v", err)
	}
	return l.V2Self
}

// A GPU handoff file that is a link to alice's ~/.bashrc (planted by bob
// before her directory was locked down): on a restart her supervisor
// writes its handoff in place of the link, never through it.
func TestSecurityHandoffLink(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	f := gputest.New(t, 1, gputest.Full)
	openUp(t, f.Root)
	openUp(t, f.LibDir)
	state := alice.mkdir(t, filepath.Join(alice.home, "state"), 0o700)
	bashrc := alice.own(t, filepath.Join(alice.home, ".bashrc"), []byte("export PS1='alice$ '\n"), 0o600)
	conn := connFileFor(t, alice)
	id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(conn), "kernel-"), ".json")
	link := filepath.Join(state, id+".gpu")
	os.Symlink(bashrc, link)
	os.Lchown(link, bob.uid, bob.gid)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--cgroup", "proc", "-f", conn, "--", "/bin/sleep", "600")
	cmd.Env = append(userEnv(alice, "TFGPU_STATE_DIR="+state), f.Env()...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: alice.credential, Setpgid: true}
	var log testutil.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	testutil.NoErr(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for !strings.Contains(log.String(), "kernel started") {
		select {
		case err := <-exited:
			t.Fatalf("supervisor exited: %v\n%s", err, log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Jupyter's restart: a signed shutdown_request with restart=true.
	ci, err := jmsg.Load(conn)
	testutil.NoErr(t, err)
	signer, _ := jmsg.NewSigner(ci.SignatureScheme, ci.Key)
	frames, _ := jmsg.NewMessage(signer, nil, "shutdown_request", nil, "s", map[string]any{"restart": true})
	ctl := zmq4.NewDealer(ctx)
	defer ctl.Close()
	testutil.NoErr(t, ctl.Dial(ci.Endpoint(jmsg.Control)))
	testutil.NoErr(t, ctl.SendMulti(zmq4.NewMsgFrom(frames...)))
	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatalf("the supervisor did not stop on the restart:\n%s", log.String())
	}
	out := log.String()
	if b, _ := os.ReadFile(bashrc); string(b) != "export PS1='alice$ '\n" {
		t.Fatalf("alice's .bashrc was written: %q\nlog:\n%s", b, out)
	}
	fi, err := os.Lstat(link)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("%s is %v (%v), want the handoff as a file of its own; log:\n%s", link, fi.Mode(), err, out)
	}
	t.Logf("handoff written as a file of its own; log:\n%s", out)
}

// delegateCgroup makes a cgroup under this process's own and hands it to
// u as systemd's Delegate=yes does (cgroup-v2.rst, "Delegation
// Containment"); it is removed after the test.
func delegateCgroup(t *testing.T, u localUser) string {
	t.Helper()
	deleg := filepath.Join(cgroupV2Parent(t), "tfgpu-deleg-"+u.name)
	testutil.NoErr(t, os.Mkdir(deleg, 0o755))
	t.Cleanup(func() {
		for i := 0; i < 100 && os.Remove(deleg) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	for _, p := range []string{deleg, deleg + "/cgroup.procs", deleg + "/cgroup.threads", deleg + "/cgroup.subtree_control"} {
		testutil.NoErr(t, os.Chown(p, u.uid, u.gid))
	}
	return deleg
}
