//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The stop order (stop, stop --hold, start) is a new thing root writes
// into a user's state directory and a signal root sends a user's process
// (docs/security.md, class 2). Attacks by the kernel's own user and by
// another user, each a real user:
//
//   - alice plants, in a state directory root is asked to read, a record
//     of a kernel of hers that names bob's running supervisor: root's stop
//     and stop --hold of it neither signal bob's supervisor nor write into
//     bob's directory (the record's owner must own the supervisor, and the
//     order goes only into the directory the supervisor itself holds open);
//   - bob puts a link where root writes his kernel's order, pointing at a
//     file of root's: root's stop parks bob's kernel and the file is
//     untouched (the order is a new file renamed over the link), neither
//     followed nor handed to bob;
//   - bob's own stop and start reach only his kernels.
func TestSecurityStopOrders(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	bobs := startUserSupervisor(t, bin, bob, "", -1, "proc", "exec sleep 600")
	bobState := filepath.Join(bob.home, "state")
	const bobID = "5b2c1e7a-aaaa-4bbb-8ccc-000000000001" // connFileFor's
	bobRecord := func() record.State {
		t.Helper()
		var st record.State
		b, err := os.ReadFile(filepath.Join(bobState, bobID+".json"))
		if err != nil || json.Unmarshal(b, &st) != nil {
			t.Fatalf("bob's record: %v", err)
		}
		return st
	}
	before := bobRecord()
	if before.Phase != record.PhaseRunning && before.Phase != record.PhaseStarting {
		t.Fatalf("bob's kernel is %s", before.Phase)
	}
	p, err := proc.Read(bobs.cmd.Process.Pid)
	testutil.NoErr(t, err)

	// alice's planted record naming bob's supervisor.
	aliceState := alice.mkdir(t, filepath.Join(alice.home, "state"), 0o700)
	const planted = "5b2c1e7a-cccc-4bbb-8ccc-000000000003"
	b, _ := json.Marshal(record.State{KernelID: planted, SupervisorPID: bobs.cmd.Process.Pid, SupervisorStart: p.Start,
		KernelPID: before.KernelPID, KernelStart: before.KernelStart, Containment: "proc", Phase: record.PhaseRunning,
		Started: time.Now(), BootID: before.BootID, Parks: true})
	path := filepath.Join(aliceState, planted+".json")
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"}
	for _, args := range [][]string{{"stop", "--state-dir", aliceState, planted}, {"stop", "--state-dir", aliceState, "--hold", planted}} {
		if err := os.WriteFile(path, b, 0o600); err != nil { // again: a refused record is removed
			t.Fatal(err)
		}
		os.Chown(path, alice.uid, alice.gid)
		code, out := runAs(t, nil, env, time.Minute, bin, args...)
		t.Logf("root's %s (exit %d):\n%s", strings.Join(args, " "), code, out)
		if strings.Contains(out, "parked by its supervisor") || strings.Contains(out, "held down") {
			t.Errorf("root's %s parked a kernel through alice's planted record", args)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(bobState, "*.stop")); len(ents) > 0 {
		t.Errorf("root wrote orders into bob's directory through alice's record: %v", ents)
	}
	if st := bobRecord(); st.Phase == record.PhaseParked || !alive(before.KernelPID) || !alive(bobs.cmd.Process.Pid) {
		t.Fatalf("bob's kernel was stopped through alice's planted record: %s, kernel alive %v", st.Phase, alive(before.KernelPID))
	}

	// bob's link where root writes his order.
	victim := filepath.Join(t.TempDir(), "root-only")
	testutil.NoErr(t, os.WriteFile(victim, []byte("root's\n"), 0o600))
	os.Chmod(filepath.Dir(victim), 0o755)
	testutil.NoErr(t, os.Symlink(victim, filepath.Join(bobState, bobID+".stop")))
	os.Lchown(filepath.Join(bobState, bobID+".stop"), bob.uid, bob.gid)
	code, out := runAs(t, nil, env, time.Minute, bin, "stop", "--message", "maintenance", bob.name+":"+bobID) // ids are public: root names whose
	if code != 0 || !strings.Contains(out, "parked by its supervisor") {
		t.Fatalf("root's stop of bob's kernel (exit %d):\n%s\nbob's supervisor:\n%s", code, out, bobs.logText())
	}
	var fi os.FileInfo
	if b, err := os.ReadFile(victim); err != nil || string(b) != "root's\n" {
		t.Errorf("root's file after the stop: %q %v", b, err)
	} else if fi, err = os.Stat(victim); err != nil || fileUID(fi) != 0 {
		t.Errorf("root's file was handed to uid %d", fileUID(fi))
	}
	if st := bobRecord(); st.Phase != record.PhaseParked || alive(before.KernelPID) || !alive(bobs.cmd.Process.Pid) {
		t.Fatalf("bob's kernel after root's stop: %s, kernel alive %v, supervisor alive %v", st.Phase, alive(before.KernelPID), alive(bobs.cmd.Process.Pid))
	}

	// bob's own commands: his kernel, and nobody else's.
	benv := userEnv(bob)
	if code, out := runAs(t, bob.credential, benv, time.Minute, bin, "stop", "--hold", bobID); code != 0 || !strings.Contains(out, "held down") {
		t.Fatalf("bob's stop --hold of his parked kernel (exit %d):\n%s", code, out)
	}
	if code, out := runAs(t, bob.credential, benv, time.Minute, bin, "start", planted); code != 2 {
		t.Errorf("bob's start of alice's planted id (exit %d):\n%s", code, out)
	}
	if code, out := runAs(t, bob.credential, benv, time.Minute, bin, "start", bobID); code != 0 || !strings.Contains(out, "hold lifted") {
		t.Fatalf("bob's start of his kernel (exit %d):\n%s", code, out)
	}
}

// fileUID is the owner of fi; -1 without one.
func fileUID(fi os.FileInfo) int {
	if fi == nil {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
