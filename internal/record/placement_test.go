package record

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The placement ledger keeps the claims that still count: written within
// ClaimWindow by a supervisor that runs, naming a kernel id and a UUID of
// NVML's shape; everything else in it is dropped on reading.
func TestPlacementClaims(t *testing.T) {
	d, dir := openTestDir(t)
	now := time.Now()
	start, err := proc.StartTime(os.Getpid())
	testutil.NoErr(t, err)
	me := proc.Ref{PID: os.Getpid(), Start: start}
	if got, err := d.Claims(now); got != nil || err != nil {
		t.Fatalf("Claims with no ledger = %v, %v", got, err)
	}
	good := Claim{Kernel: noticeID, UUID: "GPU-fa4e0000-0000-0000-0000-000000000001", Bytes: 1 << 30, At: now.Add(-time.Second), By: me}
	mig := good
	mig.UUID = "MIG-fa4e0001-0001-0000-0000-000000000000"
	bad := func(f func(c *Claim)) Claim { c := good; f(&c); return c }
	all := []Claim{good, mig,
		bad(func(c *Claim) { c.At = now.Add(-ClaimWindow - time.Second) }),  // old
		bad(func(c *Claim) { c.At = now.Add(time.Minute) }),                 // from the future
		bad(func(c *Claim) { c.By = proc.Ref{PID: os.Getpid(), Start: 2} }), // its supervisor is gone
		bad(func(c *Claim) { c.By = proc.Ref{PID: 1, Start: 1} }),           // init
		bad(func(c *Claim) { c.Kernel = "../x" }),                           // not a kernel id
		bad(func(c *Claim) { c.UUID = "GPU-1\x1b[2J" }),                     // not NVML's shape
		bad(func(c *Claim) { c.UUID = "0" }),                                // an index
		bad(func(c *Claim) { c.UUID = "GPU-" + strings.Repeat("a", 100) }),  // too long
	}
	if err := d.WriteClaims(all); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, placementsName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ledger: %v, %v; want mode 0600", fi, err)
	}
	got, err := d.Claims(now)
	if err != nil || len(got) != 2 || got[0].UUID != good.UUID || got[1].UUID != mig.UUID {
		t.Fatalf("Claims = %+v, %v; want the two that count", got, err)
	}
	many := make([]Claim, maxClaims+10)
	for i := range many {
		many[i] = good
	}
	if err := d.WriteClaims(many); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.Claims(now); len(got) != maxClaims {
		t.Errorf("%d claims read back; want at most %d", len(got), maxClaims)
	}
	os.WriteFile(filepath.Join(dir, placementsName), []byte("{not json"), 0o600)
	if _, err := d.Claims(now); err == nil {
		t.Error("a ledger that does not parse was taken")
	}
}

// A ledger planted as a link, a FIFO or another user's file is not read.
func TestPlantedLedgerIsRefused(t *testing.T) {
	requireRootUser(t)
	d, dir := openTestDir(t)
	good, _ := json.Marshal([]Claim{{Kernel: noticeID, UUID: "GPU-1", At: time.Now(), By: proc.Ref{PID: os.Getpid()}}})
	checkPlanted(t, filepath.Join(dir, placementsName), good, nil, false, func(how string) {
		if got, err := d.Claims(time.Now()); got != nil || err == nil {
			t.Errorf("%s: Claims = %v, %v; want refused", how, got, err)
		}
	})
}

// The placement lock excludes the same user's other supervisors (their
// own handles on the directory) until it is released, and a holder that
// keeps it makes the others give up after the timeout, not hang.
func TestPlacementLock(t *testing.T) {
	d, dir := openTestDir(t)
	other, err := OpenDir(dir, false, false)
	testutil.NoErr(t, err)
	defer other.Close()
	unlock, err := d.LockPlacements(time.Second)
	testutil.NoErr(t, err)
	if _, err := other.LockPlacements(50 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "still held") {
		t.Fatalf("a second handle took the held lock: %v", err)
	}
	unlock()
	unlock2, err := other.LockPlacements(time.Second)
	if err != nil {
		t.Fatalf("the released lock was not taken: %v", err)
	}
	unlock2()
}

// What ps shows of a record's placement has no control characters and at
// most 16 GPUs, whatever the record says.
func TestPlacementShown(t *testing.T) {
	p := &Placement{Asked: "auto\x1b[2J", Visible: "GPU-1\a", Why: "x\ny"}
	for range 40 {
		p.GPUs = append(p.GPUs, gpu.Unit{UUID: "GPU-\x1b]0;pwned\a", Name: "H200\r"})
	}
	s := p.shown()
	b, _ := json.Marshal(s)
	if strings.ContainsAny(string(b), "\x1b\a\r") || strings.Contains(string(b), `\u001b`) || strings.Contains(string(b), `\u0007`) || len(s.GPUs) != 16 {
		t.Errorf("shown: %s (%d GPUs)", b, len(s.GPUs))
	}
	if (*Placement)(nil).shown() != nil {
		t.Error("no placement shown as one")
	}
}

// FuzzParseClaims: any bytes of a ledger are refused or give at most
// maxClaims claims, each of which checks out, never a panic.
func FuzzParseClaims(f *testing.F) {
	now := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	good, _ := json.Marshal([]Claim{{Kernel: noticeID, UUID: "GPU-fa4e0000-0000-0000-0000-000000000001", Bytes: 1 << 30,
		At: now.Add(-time.Second), By: proc.Ref{PID: 4242, Start: 7}}})
	f.Add(good)
	f.Add([]byte(`[{"kernel":"../x","uuid":"GPU-1\u001b","at":"2026-12-06T23:00:00Z","by":{"pid":1,"start":0}}]`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseClaims(b, now, func(pid int, start uint64) bool { return pid%2 == 0 })
		if err != nil {
			return
		}
		if len(got) > maxClaims {
			t.Fatalf("%d claims from %q", len(got), b)
		}
		for _, c := range got {
			if !ValidKernelID(c.Kernel) || !unitUUID.MatchString(c.UUID) || c.By.PID <= 1 || c.By.PID%2 != 0 ||
				now.Sub(c.At) < 0 || now.Sub(c.At) > ClaimWindow {
				t.Fatalf("accepted %+v from %q", c, b)
			}
		}
	})
}
