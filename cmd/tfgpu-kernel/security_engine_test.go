//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// What #24 added to a record is the user's word too: the Slurm job and its
// cgroups (ps says "ended with its Slurm job" once they are gone) and the
// frozen check (ps reads freezer.state and cgroup.procs of a v1 tree).
// Bob plants records that lie, and root's ps and doctor must look only at
// what they verified: no "ended" for a job whose "cgroups" are bob's own
// paths, no "frozen" (and no process of alice's counted) for a fake
// freezer cgroup of bob's, no escape sequence printed; stop kills nothing
// of alice's and thaws nothing of root's.
func TestSecurityEngineClaimsAreChecked(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	bobsState := bob.mkdir(t, filepath.Join(bob.home, "state"), 0o700)
	bobs := bob.mkdir(t, filepath.Join(sharedDir(t), "bob"), 0o755)
	dead := 1 << 30
	alicePid, _ := sleeper(t, alice.credential)

	// A fake freezer cgroup of bob's that reads FROZEN and lists alice's
	// process; and a real, FROZEN one of root's with root's process in it.
	fake := bob.mkdir(t, filepath.Join(bobs, "tfgpu-k-fakefrozen-"+strconv.Itoa(dead)), 0o755)
	bob.own(t, filepath.Join(fake, "freezer.state"), []byte("FROZEN\n"), 0o644)
	bob.own(t, filepath.Join(fake, "cgroup.procs"), []byte(strconv.Itoa(alicePid)+"\n"), 0o644)
	l, err := cgroup.DetectLayout()
	testutil.NoErr(t, err)
	freezer, err := cgroup.V1SelfDir(l, "freezer")
	if err != nil {
		testutil.RequireOrSkip(t, "needs a v1 freezer hierarchy: %v", err)
	}
	rootCg := filepath.Join(freezer, "tfgpu-k-rootfrozen-"+strconv.Itoa(dead))
	testutil.NoErr(t, os.Mkdir(rootCg, 0o755))
	rootPid, _ := sleeper(t, nil)
	os.WriteFile(filepath.Join(rootCg, "cgroup.procs"), []byte(strconv.Itoa(rootPid)), 0)
	os.WriteFile(filepath.Join(rootCg, "freezer.state"), []byte("FROZEN"), 0)
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(rootCg, "freezer.state"), []byte("THAWED"), 0)
		syscall.Kill(rootPid, syscall.SIGKILL)
		for i := 0; i < 200 && os.Remove(rootCg) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	})
	gone := filepath.Join(bob.home, "job_7") // does not exist: "ended", if it were looked at
	for _, st := range []record.State{
		{KernelID: "k-job-home", SupervisorPID: dead, Containment: "proc", Slurm: &record.SlurmJob{Job: "7", Cgroups: []string{gone}}},
		{KernelID: "k-job-climb", SupervisorPID: dead, Containment: "proc",
			Slurm: &record.SlurmJob{Job: "7", Cgroups: []string{"/sys/fs/cgroup/../.." + gone}}},
		{KernelID: "k-job-escape", SupervisorPID: dead, Containment: "proc",
			Slurm: &record.SlurmJob{Job: "8\x1b]0;owned\x07\x1b[2J", Cgroups: []string{"/sys/fs/cgroup/memory/job_8"}}},
		{KernelID: "k-fakefrozen", SupervisorPID: dead, Containment: cgroup.ModeV1, Cgroup: fake},
		{KernelID: "k-rootfrozen", SupervisorPID: dead, Containment: cgroup.ModeV1, Cgroup: rootCg, BootID: record.BootID},
	} {
		bob.own(t, filepath.Join(bobsState, st.KernelID+".json"), recordJSON(t, st), 0o600)
	}
	env := append(os.Environ(), "TFGPU_STATE_DIR=")
	code, out := runAs(t, nil, env, 60*time.Second, bin, "ps", "--json", "--state-dir", bobsState)
	var rows []record.KernelStatus
	if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &rows); err != nil {
		t.Fatalf("root's ps --json (exit %d): %v\n%s", code, err, out)
	}
	for _, r := range rows {
		t.Logf("%s: state %s, why %q, pids %v", r.KernelID, r.State, r.Why, r.PIDs)
		switch {
		case strings.Contains(r.Why, "ended with its Slurm job"):
			t.Errorf("%s: root's ps believed bob's job cgroups: %q", r.KernelID, r.Why)
		case r.State == record.StateFrozen:
			t.Errorf("%s: root's ps took bob's claim of a frozen tree: %q", r.KernelID, r.Why)
		case len(r.PIDs) > 0:
			t.Errorf("%s: root's ps counted %v as bob's kernel's", r.KernelID, r.PIDs)
		}
	}
	if len(rows) != 5 {
		t.Errorf("root's ps listed %d of bob's 5 records", len(rows))
	}
	code, table := runAs(t, nil, env, 60*time.Second, bin, "ps", "--state-dir", bobsState)
	code2, doctor := runAs(t, nil, env, 60*time.Second, bin, "doctor", "--state-dir", bobsState)
	if strings.ContainsRune(table+doctor, 0x1b) || strings.ContainsRune(table+doctor, 0x07) {
		t.Fatalf("root's ps or doctor printed bob's escape sequences (exit %d, %d):\n%q\n%q", code, code2, table, doctor)
	}
	code, stop := runAs(t, nil, env, 60*time.Second, bin, "stop", "--state-dir", bobsState, "--all")
	t.Logf("ps:\n%s\ndoctor:\n%s\nstop --all (exit %d):\n%s", table, doctor, code, stop)
	if !alive(alicePid) {
		t.Fatal("alice's process was killed through bob's fake freezer cgroup")
	}
	if !alive(rootPid) {
		t.Fatal("root's process was killed through bob's record of root's frozen cgroup")
	}
	if s, _ := cgroup.FreezerState(rootCg); s != "FROZEN" {
		t.Fatalf("root's frozen cgroup was touched through bob's record: freezer.state %q", s)
	}
	if !strings.Contains(stop, "cgroup "+rootCg+" belongs to uid 0") || !strings.Contains(stop, "cgroup "+fake+" is not on a cgroup file system") {
		t.Errorf("stop does not say it refused both freezer claims:\n%s", stop)
	}
}
