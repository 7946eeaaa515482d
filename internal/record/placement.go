package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// Placement is what --gpus auto gave the kernel that runs now
// (docs/design.md#placement), as its supervisor records it for ps, the
// usage reply and the Lab status item.
type Placement struct {
	Asked string `json:"asked"` // the setting: "auto", "auto:2,min-free=20G"
	// Visible is the kernel's CUDA_VISIBLE_DEVICES: the chosen UUIDs, or
	// the value that was set before the start (Explicit).
	Visible  string     `json:"visible"`
	Explicit bool       `json:"explicit,omitempty"` // CUDA_VISIBLE_DEVICES was set: nothing was chosen
	GPUs     []gpu.Unit `json:"gpus,omitempty"`     // the chosen, with their free memory when chosen
	Enough   bool       `json:"enough"`             // each had the room asked for
	Why      string     `json:"why,omitempty"`      // one line: how it was chosen, or why not
	At       time.Time  `json:"at"`
}

// shown is p as ps shows it, from a record that is a claim: its text
// printable, its GPUs as many as --gpus auto chooses at most.
func (p *Placement) shown() *Placement {
	if p == nil {
		return nil
	}
	out := *p
	out.Asked, out.Visible, out.Why = Printable(p.Asked), Printable(p.Visible), Printable(p.Why)
	out.GPUs = nil
	for _, u := range p.GPUs[:min(len(p.GPUs), 16)] {
		u.UUID, u.Name = Printable(u.UUID), Printable(u.Name)
		out.GPUs = append(out.GPUs, u)
	}
	return &out
}

// The placement ledger: the GPUs --gpus auto gave this user's kernels in
// the last ClaimWindow, with what each is assumed to take (place.Claim).
// Kernels that start at the same moment have allocated nothing yet, so
// NVML shows the same free memory to all of them; each subtracts the
// others' claims, under the directory's placement lock, and they spread.
// The file is the user's own, in the 0700 state directory, read back
// through Dir.read's checks and its entries checked again: at most
// maxClaims, each naming a kernel id, a UUID of the shape NVML gives and
// the supervisor (pid and start time) that wrote it, which must still run.
const (
	placementsName = "placements.ledger"
	// ClaimWindow is how long a claim counts: by then the kernel has
	// imported its framework and taken its memory, which NVML shows.
	ClaimWindow = time.Minute
	maxClaims   = 256
)

// Claim is one placement in the ledger.
type Claim struct {
	Kernel string    `json:"kernel"`
	UUID   string    `json:"uuid"`
	Bytes  uint64    `json:"bytes"`
	At     time.Time `json:"at"`
	By     proc.Ref  `json:"by"` // the supervisor that placed it
}

// unitUUID is the shape of a UUID NVML gives a GPU or a MIG instance.
var unitUUID = regexp.MustCompile(`^(GPU|MIG)-[0-9A-Za-z-]{1,90}$`)

// LockPlacements takes the directory's placement lock, an flock on the
// directory handle itself (no file for anyone to plant), trying until
// timeout; unlock releases it. Only the user's own processes can open the
// directory, so only they can hold the lock: a kernel that holds it too
// long delays its own user's starts by timeout at most.
func (d *Dir) LockPlacements(timeout time.Duration) (unlock func(), err error) {
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(d.fd(), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(d.fd(), unix.LOCK_UN) }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("placement lock on %s: %w", d.path, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("placement lock on %s: still held after %v", d.path, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Claims reads the ledger and returns the claims that still count at now
// (parseClaims). No ledger is no claims.
func (d *Dir) Claims(now time.Time) ([]Claim, error) {
	b, err := d.read(placementsName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("placement ledger: %w", err)
	}
	return parseClaims(b, now, aliveSince)
}

// parseClaims returns the claims of a ledger's content that count at now:
// made within ClaimWindow (and not after now) by a supervisor that runs
// (alive: its pid, not a zombie, with its start time), at most maxClaims.
// An entry that does not check out is dropped; content that does not
// parse is an error.
func parseClaims(b []byte, now time.Time, alive func(pid int, start uint64) bool) ([]Claim, error) {
	var all []Claim
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("placement ledger: %w", err)
	}
	var out []Claim
	for _, c := range all {
		age := now.Sub(c.At)
		if len(out) == maxClaims || !ValidKernelID(c.Kernel) || !unitUUID.MatchString(c.UUID) ||
			age < 0 || age > ClaimWindow || c.By.PID <= 1 || !alive(c.By.PID, c.By.Start) {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// WriteClaims replaces the ledger with claims (the last maxClaims).
func (d *Dir) WriteClaims(claims []Claim) error {
	if len(claims) > maxClaims {
		claims = claims[len(claims)-maxClaims:]
	}
	b, err := json.Marshal(claims)
	if err != nil {
		return err
	}
	return d.write(placementsName, b)
}
