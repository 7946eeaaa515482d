package record

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// A supervisor publishes its kernel's execution state through the mapped
// activity file; ps reads each change at once, and the file goes with the
// record.
func TestActivityIsPublished(t *testing.T) {
	d, dir := openTestDir(t)
	start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	a, err := d.PublishActivity("k1", start)
	testutil.NoErr(t, err)
	defer a.Close()
	fi, err := os.Lstat(filepath.Join(dir, "k1.activity"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != activitySize {
		t.Fatalf("activity file: %v, %v; want a regular 0600 file of %d bytes", fi, err, activitySize)
	}
	st := State{KernelID: "k1", SupervisorPID: os.Getpid(), Phase: PhaseRunning, Started: start}
	if err := d.Write(st); err != nil {
		t.Fatal(err)
	}
	read := func() *Activity {
		t.Helper()
		sts, _, err := d.States()
		if err != nil || len(sts) != 1 {
			t.Fatalf("States = %v, %v", sts, err)
		}
		return sts[0].Activity
	}
	if got := read(); got == nil || got.Busy || !got.Since.Equal(start) {
		t.Fatalf("at start: %+v, want idle since %v", got, start)
	}
	busy := time.Now().Truncate(time.Millisecond)
	a.Set(true, busy)
	if got := read(); got == nil || !got.Busy || !got.Since.Equal(busy) || got.State() != ExecBusy {
		t.Fatalf("after Set(true): %+v", got)
	}
	idle := busy.Add(1500 * time.Millisecond)
	a.Set(false, idle)
	if got, err := ReadActivity(State{KernelID: "k1", SupervisorPID: os.Getpid(), Dir: dir}); err != nil ||
		got.Busy || !got.Since.Equal(idle) {
		t.Fatalf("ReadActivity after Set(false): %+v, %v", got, err)
	}
	// The record of another supervisor of the kernel (the next one, after a
	// restart) does not take this one's state.
	if _, err := ReadActivity(State{KernelID: "k1", SupervisorPID: os.Getpid() + 1, Dir: dir}); err == nil ||
		!strings.Contains(err.Error(), "not by the record's supervisor") {
		t.Fatalf("another supervisor's record read this one's activity: %v", err)
	}
	d.Remove("k1")
	for _, name := range []string{"k1.json", "k1.activity"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s after Remove: %v", name, err)
		}
	}
	a.Set(true, time.Now()) // the mapping outlives the file
}

// Remove takes only this process's activity file: the next supervisor of
// the kernel may have published its own.
func TestActivityOfAnotherSupervisorStays(t *testing.T) {
	d, dir := openTestDir(t)
	b := activityBytes(os.Getpid()+1, time.Now())
	testutil.NoErr(t, os.WriteFile(filepath.Join(dir, "k1.activity"), b, 0o600))
	d.Remove("k1")
	if _, err := os.Lstat(filepath.Join(dir, "k1.activity")); err != nil {
		t.Fatalf("another supervisor's activity file was removed: %v", err)
	}
}

// What ps reads is planted-file proof: a link, another user's file or a
// malformed one leave the kernel's state unknown, and nothing is followed.
func TestActivityFilesAreChecked(t *testing.T) {
	requireRootUser(t)
	d, dir := openTestDir(t)
	good := activityBytes(os.Getpid(), time.Now())
	plant, _ := plantings(t, good)
	plant["short"] = func(p string) { os.WriteFile(p, good[:20], 0o600) }
	plant["oversize"] = func(p string) { os.WriteFile(p, append(good, 0), 0o600) }
	for name, f := range plant {
		f(filepath.Join(dir, name+".activity"))
		st := State{KernelID: name, SupervisorPID: os.Getpid(), Phase: PhaseRunning}
		if err := d.Write(st); err != nil {
			t.Fatal(err)
		}
	}
	sts, _, err := d.States()
	if err != nil || len(sts) != len(plant) {
		t.Fatalf("States = %d records, %v", len(sts), err)
	}
	for _, st := range sts {
		if st.Activity != nil {
			t.Errorf("%s: planted activity file taken: %+v", st.KernelID, st.Activity)
		}
	}
}

func TestParseActivity(t *testing.T) {
	now := time.Now()
	at := now.Add(-time.Minute).Truncate(time.Millisecond)
	good := activityBytes(42, at)
	if a, err := ParseActivity(good, 42, now); err != nil || a.Busy || !a.Since.Equal(at) {
		t.Fatalf("ParseActivity(good) = %+v, %v", a, err)
	}
	bad := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("tfgpuAc2"), good[8:]...),
		"future":    activityBytes(42, now.Add(time.Hour)),
		"too early": activityBytes(42, time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
	for name, b := range bad {
		if a, err := ParseActivity(b, 42, now); err == nil {
			t.Errorf("%s: accepted as %+v", name, a)
		}
	}
	for _, pid := range []int{0, -1, 43} {
		if _, err := ParseActivity(good, pid, now); err == nil {
			t.Errorf("accepted for supervisor pid %d", pid)
		}
	}
}

// FuzzParseActivity: any bytes from an activity file are refused or give
// a state within the bounds ParseActivity promises, never a panic.
func FuzzParseActivity(f *testing.F) {
	now := time.Now()
	f.Add(activityBytes(42, now))
	f.Add(activityBytes(42, now.Add(time.Hour)))
	f.Add([]byte(activityMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseActivity(b, 42, now)
		if err != nil {
			return
		}
		if len(b) != activitySize || !bytes.HasPrefix(b, []byte(activityMagic)) ||
			a.Since.After(now.Add(time.Minute)) || a.Since.Year() < 2020 {
			t.Fatalf("accepted %x as %+v", b, a)
		}
	})
}

// activityBytes is an activity file as supervisor pid writes it, idle
// since at.
func activityBytes(pid int, at time.Time) []byte {
	b := make([]byte, activitySize)
	copy(b, activityMagic)
	binary.NativeEndian.PutUint64(b[8:], uint64(pid))
	binary.NativeEndian.PutUint64(b[16:], activityWord(false, at))
	return b
}
