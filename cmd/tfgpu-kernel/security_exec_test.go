//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Issue 22, class 3: privileged code never runs what a user controls. Root's
// doctor and install run Python (probes, jupyter_client) and read other
// users' kernelspecs; bob plants what root would run or copy, each plant
// leaving a mark if it ever runs, and nothing of his may run as root.

// rootIn runs bin args as root in dir with env; exit code and output.
func rootIn(t *testing.T, dir string, env []string, bin string, args ...string) (int, string) {
	t.Helper()
	return runAsIn(t, nil, dir, env, 2*time.Minute, bin, args...)
}

// markerGone fails the test if bob's plant left its mark.
func markerGone(t *testing.T, marker, what string) {
	t.Helper()
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("%s: bob's code ran as %q", what, strings.TrimSpace(string(b)))
		os.Remove(marker)
	}
}

// C and E: a json.py in the directory root works in (python -c puts the
// working directory first on sys.path), and a kernelspec whose Python is
// bob's: root's doctor and install run neither.
func TestSecurityRootRunsNoUsersPython(t *testing.T) {
	installJupyterPython(t)
	bin := sharedBinary(t)
	bob := newLocalUser(t, "bob")
	marks := sharedDir(t)
	os.Chmod(marks, 0o777)
	marker := filepath.Join(marks, "ran")
	plant := "import os\nopen(" + `"` + marker + `"` + ", \"w\").write(\"uid %d\" % os.getuid())\n"

	// C: bob's directory, with json.py, where root happens to be.
	cwd := bob.mkdir(t, filepath.Join(bob.home, "work"), 0o755)
	bob.own(t, filepath.Join(cwd, "json.py"), []byte(plant+"from _json import *\n"), 0o644)
	bob.own(t, filepath.Join(cwd, "platform.py"), []byte(plant), 0o644)
	// E: bob's Python, behind a kernelspec of ours in a directory on JUPYTER_PATH.
	bobBin := bob.mkdir(t, filepath.Join(bob.home, "venv", "bin"), 0o755)
	bobPy := bob.own(t, filepath.Join(bobBin, "python3"), []byte("#!/bin/sh\necho \"uid $(id -u)\" >"+marker+"\nexec /usr/bin/python3 \"$@\"\n"), 0o755)
	jp := bob.mkdir(t, filepath.Join(bob.home, "jupyter"), 0o755)
	bob.mkdir(t, filepath.Join(jp, "kernels"), 0o755)
	spec := bob.mkdir(t, filepath.Join(jp, "kernels", "bobs"), 0o755)
	kj, _ := json.Marshal(map[string]any{
		"argv":         []string{bin, "run", "-f", "{connection_file}", "--", bobPy, "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		"display_name": "bob's", "language": "python", "metadata": map[string]any{"tfgpu": map[string]any{"version": "planted"}},
	})
	bob.own(t, filepath.Join(spec, "kernel.json"), kj, 0o644)

	home := t.TempDir()
	env := append(e2eCleanEnv(), "HOME="+home, "JUPYTER_PATH="+jp, "TFGPU_STATE_DIR="+t.TempDir(), "PATH=/usr/bin:/bin")

	code, out := rootIn(t, cwd, env, bin, "doctor")
	markerGone(t, marker, "root's doctor")
	if !strings.Contains(out, "kernelspec:   bobs in "+spec) || !strings.Contains(out, "not run as root") {
		t.Errorf("doctor (exit %d) does not say it left bob's Python alone:\n%s", code, out)
	}
	code, out = rootIn(t, cwd, env, bin, "install", "--prefix", filepath.Join(home, "p"), "--python", "/usr/bin/python3")
	markerGone(t, marker, "root's install")
	if code != 0 {
		t.Errorf("install from bob's directory: exit %d\n%s", code, out)
	}
	code, out = rootIn(t, cwd, env, bin, "install", "--prefix", filepath.Join(home, "p"), "--python", bobPy)
	markerGone(t, marker, "root's install --python of bob's")
	if code == 0 || !strings.Contains(out, "belongs to uid") {
		t.Errorf("install --python of bob's as root: exit %d\n%s", code, out)
	}
	code, out = rootIn(t, cwd, env, bin, "install", "--prefix", filepath.Join(home, "p"), "--wrap", "bobs", "--python", "/usr/bin/python3")
	markerGone(t, marker, "root's install --wrap by name")
	if code == 0 {
		t.Errorf("root wrapped a kernelspec that is ours already:\n%s", out)
	}
}

// F: install --wrap of bob's kernelspec as root copies no file through a
// link (bob's logo → root's secret) and makes no copy readable by more
// than its original.
func TestSecurityWrapCopiesNoSecrets(t *testing.T) {
	installJupyterPython(t)
	bin := sharedBinary(t)
	bob := newLocalUser(t, "bob")
	secret := filepath.Join(t.TempDir(), "shadow")
	os.WriteFile(secret, []byte("root:secret-hash:19000\n"), 0o600)
	spec := bob.mkdir(t, filepath.Join(bob.home, "kernels", "bobs"), 0o755)
	bob.own(t, filepath.Join(spec, "kernel.json"),
		[]byte(`{"argv":["/usr/bin/python3","-m","ipykernel_launcher","-f","{connection_file}"],"display_name":"Bob's","language":"python"}`), 0o644)
	bob.own(t, filepath.Join(spec, "kernel.js"), []byte("// bob's own, for bob only\n"), 0o600)
	for _, n := range []string{"logo-64x64.png", "kernel.css"} {
		testutil.NoErr(t, os.Symlink(secret, filepath.Join(spec, n)))
		os.Lchown(filepath.Join(spec, n), bob.uid, bob.gid)
	}
	prefix := t.TempDir()
	env := append(e2eCleanEnv(), "HOME="+t.TempDir(), "PATH=/usr/bin:/bin")
	code, out := rootIn(t, "/", env, bin, "install", "--wrap", spec, "--prefix", prefix, "--python", "/usr/bin/python3")
	if code != 0 {
		t.Fatalf("install --wrap: exit %d\n%s", code, out)
	}
	dir := filepath.Join(prefix, "share", "jupyter", "kernels", "bobs-tfgpu")
	ents, err := os.ReadDir(dir)
	testutil.NoErr(t, err)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		b, _ := os.ReadFile(p)
		fi, _ := os.Lstat(p)
		if bytes.Contains(b, []byte("secret-hash")) {
			t.Errorf("%s holds root's secret (mode %v)", p, fi.Mode())
		}
		if e.Name() == "kernel.js" && fi.Mode().Perm() != 0o600 {
			t.Errorf("kernel.js copied with mode %v, wider than bob's 0600", fi.Mode().Perm())
		}
		if e.Name() == "kernel.css" {
			t.Errorf("kernel.css, a link, was copied")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "logo-64x64.png")); err != nil {
		t.Errorf("the wrapper has no logo (ours should stand in for the refused link): %v", err)
	}
}

// J: ids are public (the supervisor's command line), so bob plants a
// record whose id is alice's with an "x" after it: root's `stop <alice's
// id>` still stops alice's kernel, and nothing of bob's plant is acted on.
func TestSecurityRootStopsTheExactID(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	const id = "5b2c1e7a-aaaa-4bbb-8ccc-0000000000a1"
	runState := func(u localUser) string {
		run := filepath.Join("/run/user", strconv.Itoa(u.uid))
		u.mkdir(t, run, 0o700)
		t.Cleanup(func() { os.RemoveAll(run) })
		return u.mkdir(t, filepath.Join(run, "tfgpu-kernel"), 0o700)
	}
	alicePid, aliceStart := sleeper(t, alice.credential)
	alice.own(t, filepath.Join(runState(alice), id+".json"), recordJSON(t, record.State{KernelID: id, SupervisorPID: 1 << 30,
		KernelPID: alicePid, KernelStart: aliceStart, Containment: "proc"}), 0o600)
	bobPid, bobStart := sleeper(t, bob.credential)
	bob.own(t, filepath.Join(runState(bob), id+"x.json"), recordJSON(t, record.State{KernelID: id + "x", SupervisorPID: 1 << 30,
		KernelPID: bobPid, KernelStart: bobStart, Containment: "proc"}), 0o600)

	env := append(os.Environ(), "TFGPU_STATE_DIR=")
	code, out := runAs(t, nil, env, 60*time.Second, bin, "stop", id)
	for i := 0; i < 100 && alive(alicePid); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if code != 0 || alive(alicePid) || !strings.Contains(out, "stopped kernel "+alice.name+":"+id) {
		t.Fatalf("root's stop %s with bob's %sx planted: exit %d, alice's kernel alive %v:\n%s", id, id, code, alive(alicePid), out)
	}
	if !alive(bobPid) {
		t.Errorf("bob's planted record was acted on")
	}
}

// I: bob plants "running, idle 3 h" kernels whose "supervisor" is his own
// process that ignores SIGTERM: each costs root's `stop --idle-for` its
// --timeout. Root takes a kernel only from a running supervisor (a process
// named tfgpu-kernel running `run`, holding the record's directory open),
// so records naming any other process are ignored outright; and "supervisors"
// that do look the part (here a copy of sh named tfgpu-kernel, run as
// `tfgpu-kernel run -f …`) are stopped side by side, so each costs its own
// timeout, not every kernel's after it: every one is asked (SIGTERM) while
// all of them are still alive.
func TestSecurityIdleStopIsNotStalledByPlantedSupervisors(t *testing.T) {
	bin := sharedBinary(t)
	bob := newLocalUser(t, "bob")
	const n = 6
	shared := sharedDir(t)
	os.Chmod(shared, 0o777)
	pidsFile, seenFile := filepath.Join(shared, "pids"), filepath.Join(shared, "seen")
	// Each holds the state directory open (as supervisors do) and counts,
	// when SIGTERMed, how many of the planted are alive (not zombies: this
	// test reaps them only at its end).
	sh, _ := os.ReadFile("/bin/sh")
	fake := filepath.Join(shared, "tfgpu-kernel")
	os.WriteFile(fake, sh, 0o755)
	run := filepath.Join("/run/user", strconv.Itoa(bob.uid))
	bob.mkdir(t, run, 0o700)
	t.Cleanup(func() { os.RemoveAll(run) })
	state := bob.mkdir(t, filepath.Join(run, "tfgpu-kernel"), 0o700)
	os.WriteFile(filepath.Join(shared, "run"), []byte(`exec 3<`+state+`
trap 'n=0; for p in $(cat `+pidsFile+`); do s=$(cut -d" " -f3 /proc/$p/stat 2>/dev/null); [ -n "$s" ] && [ "$s" != Z ] && n=$((n+1)); done; echo $n >> `+seenFile+`' TERM
while :; do sleep 0.1; done
`), 0o644)
	plant := func(id string, pid int, start uint64) {
		bob.own(t, filepath.Join(state, id+".json"), recordJSON(t, record.State{KernelID: id, SupervisorPID: pid, SupervisorStart: start,
			KernelPID: pid, KernelStart: start, Containment: "proc", Phase: record.PhaseRunning}), 0o600)
		act := make([]byte, 24)
		copy(act, "tfgpuAc1")
		binary.NativeEndian.PutUint64(act[8:], uint64(pid))
		binary.NativeEndian.PutUint64(act[16:], uint64(time.Now().Add(-3*time.Hour).UnixMilli())<<1)
		bob.own(t, filepath.Join(state, id+".activity"), act, 0o600)
	}
	start := func(argv ...string) (int, uint64) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = shared
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: bob.credential}
		testutil.NoErr(t, cmd.Start())
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		st, err := proc.StartTime(cmd.Process.Pid)
		testutil.NoErr(t, err)
		return cmd.Process.Pid, st
	}
	var pids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("5b2c1e7a-bbbb-4bbb-8ccc-00000000000%d", i)
		pid, st := start(fake, "run", "-f", "/nonexistent/kernel-"+id+".json")
		pids = append(pids, strconv.Itoa(pid))
		plant(id, pid, st)
	}
	os.WriteFile(pidsFile, []byte(strings.Join(pids, " ")), 0o644)
	// And records naming plain processes of bob's, not supervisors.
	plainPid, plainStart := start("/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done")
	for i := 0; i < 3; i++ {
		plant(fmt.Sprintf("5b2c1e7a-cccc-4bbb-8ccc-00000000000%d", i), plainPid, plainStart)
	}
	// Wait until every fake supervisor holds the directory open.
	for _, p := range pids {
		for i := 0; ; i++ {
			if l, _ := os.Readlink("/proc/" + p + "/fd/3"); l == state {
				break
			}
			if i == 500 {
				t.Fatalf("the fake supervisor %s never opened %s", p, state)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	env := append(os.Environ(), "TFGPU_STATE_DIR=")
	code, out := runAs(t, nil, env, 5*time.Minute, bin, "stop", "--idle-for", "1h", "--timeout", "2s")
	seen, _ := os.ReadFile(seenFile)
	counts := strings.Fields(string(seen))
	if strings.Count(out, ": stopping") != n || len(counts) != n {
		t.Fatalf("stop --idle-for (exit %d) stopped %d of the %d planted, %d asked:\n%s", code, strings.Count(out, ": stopping"), n, len(counts), out)
	}
	for _, c := range counts {
		if c != strconv.Itoa(n) {
			t.Errorf("a planted supervisor was asked to stop while only %s of the %d were alive: one at a time, each waits for the ones before (%q)", c, n, counts)
		}
	}
	if !alive(plainPid) || !strings.Contains(out, "3 records name live processes that are not tfgpu-kernel supervisors: ignored") {
		t.Errorf("records naming a plain process were acted on, or not said to be ignored:\n%s", out)
	}
}

// K and H: bob's kernel, whose supervisor records it in a directory of his
// own choosing (TFGPU_STATE_DIR=~/hidden), is listed by root's ps all the
// same (found from the running supervisor), and 3000 records planted in
// his runtime directory cost root's ps a bounded read (16 of them), not
// a scan each: its time with them is printed beside its time without.
func TestSecurityRootFindsKernelsFromProcesses(t *testing.T) {
	bin := sharedBinary(t)
	bob := newLocalUser(t, "bob")
	hidden := bob.mkdir(t, filepath.Join(bob.home, "hidden"), 0o700)
	cmd := startUserSupervisor(t, bin, bob, hidden, -1, "proc", "exec sleep 600").cmd
	id := "5b2c1e7a-aaaa-4bbb-8ccc-000000000001"
	env := append(os.Environ(), "TFGPU_STATE_DIR=")
	ps := func() ([]record.KernelStatus, string, time.Duration) {
		t.Helper()
		t0 := time.Now()
		code, out := runAs(t, nil, env, 2*time.Minute, bin, "ps", "--json")
		took := time.Since(t0)
		var rows []record.KernelStatus
		if i := strings.Index(out, "["); code != 0 || i < 0 || json.Unmarshal([]byte(out[i:]), &rows) != nil {
			t.Fatalf("root's ps --json (exit %d):\n%s", code, out)
		}
		return rows, out, took
	}
	has := func(rows []record.KernelStatus) bool {
		for _, r := range rows {
			if r.KernelID == id && r.UID == bob.uid && r.SupervisorPID == cmd.Process.Pid {
				return true
			}
		}
		return false
	}
	var without []time.Duration
	for range 5 {
		rows, out, took := ps()
		if !has(rows) {
			t.Fatalf("root's ps does not list bob's kernel recorded in %s:\n%s", hidden, out)
		}
		without = append(without, took)
	}

	run := filepath.Join("/run/user", strconv.Itoa(bob.uid))
	bob.mkdir(t, run, 0o700)
	t.Cleanup(func() { os.RemoveAll(run) })
	state := bob.mkdir(t, filepath.Join(run, "tfgpu-kernel"), 0o700)
	victimPid, victimStart := sleeper(t, bob.credential)
	pad := strings.Repeat("x", 3500) // 4 KB records, as in the report
	for i := range 3000 {
		kid := fmt.Sprintf("5b2c1e7a-dddd-4bbb-8ccc-%012d", i)
		bob.own(t, filepath.Join(state, kid+".json"), recordJSON(t, record.State{KernelID: kid, SupervisorPID: 1,
			KernelPID: victimPid, KernelStart: victimStart, Containment: "proc", Session: pad}), 0o600)
	}
	var with []time.Duration
	var out string
	for range 5 {
		var rows []record.KernelStatus
		var took time.Duration
		rows, out, took = ps()
		if !has(rows) {
			t.Fatalf("with 3000 planted records, root's ps lost bob's kernel:\n%s", out)
		}
		bobs := slices.DeleteFunc(rows, func(r record.KernelStatus) bool { return r.UID != bob.uid }) // other kernels may run on the host
		if len(bobs) > 1+16 {
			t.Fatalf("root's ps read %d of bob's kernels: more than the running one and 16 of the planted", len(bobs))
		}
		with = append(with, took)
	}
	if !strings.Contains(out, "more than 16 records, more than a user's kernels: read 16 of them") {
		t.Errorf("root's ps did not say it read only part of bob's flood:\n%s", out)
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	t.Logf("root's ps, median of 5: %v without the 3000 planted records, %v with them (%.2f×)",
		med(without), med(with), float64(med(with))/float64(med(without)))
}

// H: bob plants a proc-mode record whose "supervisor" is a subreaper that
// is not his (here this test process, which alice's orphan is reparented
// to) and whose kernel is his own process: root's ps must not count
// alice's orphan, or any process but bob's, as his kernel's.
func TestSecurityPsAttributesOnlyTheOwnersProcesses(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	testutil.NoErr(t, proc.SetChildSubreaper())
	// alice's orphan: her shell exits, its sleep is reparented to us.
	orphanFile := filepath.Join(sharedDir(t), "orphan")
	os.Chmod(filepath.Dir(orphanFile), 0o777)
	sh := exec.Command("/bin/sh", "-c", "sleep 600 & echo $! > "+orphanFile)
	sh.SysProcAttr = &syscall.SysProcAttr{Credential: alice.credential}
	testutil.NoErr(t, sh.Run())
	b, _ := os.ReadFile(orphanFile)
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	t.Cleanup(func() {
		syscall.Kill(orphan, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(orphan, &ws, 0, nil)
	})
	bobPid, bobStart := sleeper(t, bob.credential)
	self, _ := proc.StartTime(os.Getpid())
	run := filepath.Join("/run/user", strconv.Itoa(bob.uid))
	bob.mkdir(t, run, 0o700)
	t.Cleanup(func() { os.RemoveAll(run) })
	state := bob.mkdir(t, filepath.Join(run, "tfgpu-kernel"), 0o700)
	const id = "5b2c1e7a-cccc-4bbb-8ccc-0000000000c1"
	bob.own(t, filepath.Join(state, id+".json"), recordJSON(t, record.State{KernelID: id, SupervisorPID: os.Getpid(), SupervisorStart: self,
		KernelPID: bobPid, KernelStart: bobStart, Containment: "proc", Phase: record.PhaseRunning}), 0o600)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "ps", "--json")
	cmd.Env = append(os.Environ(), "TFGPU_STATE_DIR=")
	out, err := cmd.Output()
	var rows []record.KernelStatus
	if err != nil || json.Unmarshal(out, &rows) != nil {
		t.Fatalf("root's ps --json: %v\n%s", err, out)
	}
	found := false
	for _, r := range rows {
		if r.KernelID != id {
			continue
		}
		found = true
		for _, p := range r.PIDs {
			if owner := proc.Owner(p); owner != bob.uid {
				t.Errorf("bob's planted kernel is shown with pid %d of uid %d (alice's orphan is %d)", p, owner, orphan)
			}
		}
	}
	if !found {
		t.Fatalf("root's ps does not list bob's record:\n%s", out)
	}
}

// A user's ps and stop find the user's own kernels whatever state directory
// each supervisor chose (another XDG_RUNTIME_DIR under `su -`, cron or
// `sudo -u`; a TFGPU_STATE_DIR): from the user's running supervisors, and
// never another user's.
func TestUserFindsOwnKernelsInEveryStateDir(t *testing.T) {
	bin := sharedBinary(t)
	bob, alice := newLocalUser(t, "bob"), newLocalUser(t, "alice")
	bobs := startUserSupervisor(t, bin, bob, bob.mkdir(t, filepath.Join(bob.home, "elsewhere"), 0o700), -1, "proc", "exec sleep 600").cmd
	alices := startUserSupervisor(t, bin, alice, "", -1, "proc", "exec sleep 600").cmd

	// bob's ps and stop with his default state directory (none of his
	// kernels recorded there).
	env := userEnv(bob)
	code, out := runAs(t, bob.credential, env, time.Minute, bin, "ps", "--json")
	var rows []record.KernelStatus
	if i := strings.Index(out, "["); code != 0 || i < 0 || json.Unmarshal([]byte(out[i:]), &rows) != nil {
		t.Fatalf("bob's ps --json (exit %d):\n%s", code, out)
	}
	if len(rows) != 1 || rows[0].SupervisorPID != bobs.Process.Pid {
		t.Fatalf("bob's ps lists %+v; want his one kernel (supervisor %d), not alice's (%d)", rows, bobs.Process.Pid, alices.Process.Pid)
	}
	if strings.Contains(out, "refused") {
		t.Errorf("bob's ps printed refusals:\n%s", out)
	}
	// One character of the id names nothing (a typo must not stop a kernel).
	if code, out := runAs(t, bob.credential, env, time.Minute, bin, "stop", rows[0].KernelID[:1]); code != 2 ||
		!strings.Contains(out, "give the whole id or at least 4 characters of it") || !alive(bobs.Process.Pid) {
		t.Fatalf("bob's stop %s (exit %d):\n%s", rows[0].KernelID[:1], code, out)
	}
	if code, out := runAs(t, bob.credential, env, time.Minute, bin, "stop", rows[0].KernelID); code != 0 || !strings.Contains(out, "stopped kernel") {
		t.Fatalf("bob's stop of his kernel (exit %d):\n%s", code, out)
	}
	if !alive(alices.Process.Pid) {
		t.Fatal("bob's stop touched alice's supervisor")
	}
}
