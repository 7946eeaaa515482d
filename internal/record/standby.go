package record

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"golang.org/x/sys/unix"
)

// StandbyName is the name, in the state directory, of the unix socket on
// which the standby supervisor of kernel id waits to be adopted by that
// kernel's next supervisor (docs/design.md#spare-kernel).
func StandbyName(id string) string { return id + ".standby" }

// Spare is what a standby supervisor records about the spare kernel it
// keeps for kernel KernelID's next restart (file SpareName), for ps and
// doctor. Read back, it names processes only once both check out
// (ReadSpare).
type Spare struct {
	KernelID     string    `json:"kernel_id"`
	StandbyPID   int       `json:"standby_pid"`
	StandbyStart uint64    `json:"standby_start"`
	PID          int       `json:"pid"` // the spare kernel
	Start        uint64    `json:"start"`
	Ready        time.Time `json:"ready"`
	Preload      []string  `json:"preload,omitempty"`
	// Off says why the kernel keeps no spare (then no process is named);
	// with GPU, because a spare held a GPU context after its imports,
	// which holds for the kernel's next supervisors too.
	Off string `json:"off,omitempty"`
	GPU bool   `json:"gpu,omitempty"`
	// Watcher is the standby's watcher; Cgroup and MemoryCgroup the
	// standby's containment of the spare (the kernel's, once adopted), so
	// that doctor knows them for a live kernel's.
	Watcher      *proc.Ref `json:"watcher,omitempty"`
	Cgroup       string    `json:"cgroup,omitempty"`
	MemoryCgroup string    `json:"memory_cgroup,omitempty"`
}

// SpareName is the file of kernel id's spare.
func SpareName(id string) string { return id + ".spare" }

// WriteSpare records sp.
func (d *Dir) WriteSpare(sp Spare) error {
	b, err := json.Marshal(sp)
	if err != nil {
		return err
	}
	return d.write(SpareName(sp.KernelID), append(b, '\n'))
}

// RemoveSpare removes kernel id's spare record if standby wrote it (0:
// if it says why there is none).
func (d *Dir) RemoveSpare(id string, standby int) {
	if sp, err := d.readSpare(id); err == nil && sp.StandbyPID == standby && (standby != 0 || sp.Off != "") {
		_ = d.remove(SpareName(id))
	}
}

func (d *Dir) readSpare(id string) (*Spare, error) {
	b, err := d.read(SpareName(id))
	if err != nil {
		return nil, err
	}
	return ParseSpare(b, id)
}

// Bounds of a spare record read back: what a standby writes is well
// inside them.
const (
	spareMaxOff     = 1024 // bytes of the reason why none is kept
	spareMaxPreload = 64   // modules (run's --preload takes no more)
)

// ParseSpare reads a spare record of kernel id: one JSON object of the
// known fields, naming that kernel, with a reason of at most spareMaxOff
// bytes and at most spareMaxPreload modules; anything else is refused
// (ErrRefused). Its pids are checked by ReadSpare, not here.
func ParseSpare(b []byte, id string) (*Spare, error) {
	var sp Spare
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return nil, fmt.Errorf("%s: not a spare record: %v: %w", SpareName(id), err, ErrRefused)
	}
	switch {
	case dec.More():
		return nil, fmt.Errorf("%s: data after the record: %w", SpareName(id), ErrRefused)
	case sp.KernelID != id:
		return nil, fmt.Errorf("%s names kernel %q: %w", SpareName(id), Printable(sp.KernelID), ErrRefused)
	case len(sp.Off) > spareMaxOff || len(sp.Preload) > spareMaxPreload || len(sp.Cgroup) > maxPath || len(sp.MemoryCgroup) > maxPath:
		return nil, fmt.Errorf("%s: over its bounds: %w", SpareName(id), ErrRefused)
	case sp.Off == "" && sp.GPU:
		return nil, fmt.Errorf("%s: gpu without a reason: %w", SpareName(id), ErrRefused)
	}
	for _, m := range sp.Preload {
		if len(m) > maxWord*4 { // run's --preload takes dotted names
			return nil, fmt.Errorf("%s: a preloaded module's name over its bound: %w", SpareName(id), ErrRefused)
		}
	}
	return &sp, nil
}

// ReadSpare returns kernel id's spare when its record checks out: the
// standby and the spare are alive, with the start times recorded, and are
// processes of the directory's owner. nil otherwise.
func (d *Dir) ReadSpare(id string) *Spare {
	sp, err := d.readSpare(id)
	if err != nil {
		return nil
	}
	if sp.Off != "" {
		sp.StandbyPID, sp.PID = 0, 0
		return sp
	}
	for _, p := range []struct {
		pid   int
		start uint64
	}{{sp.StandbyPID, sp.StandbyStart}, {sp.PID, sp.Start}} {
		if !aliveSince(p.pid, p.start) || proc.Owner(p.pid) != d.uid {
			return nil
		}
	}
	return sp
}

// SweepSpares removes what standbys that died unasked (SIGKILL: a
// scancel, the OOM killer) left in d: a spare record whose standby or
// spare is gone, and its socket; a socket without a record; the record
// that a kernel keeps no spare, once no live supervisor records that
// kernel. Kernel keep (the caller's own) is left alone, and so is any
// file that is not the directory owner's. It returns how many files went.
func (d *Dir) SweepSpares(keep string) int {
	n := 0
	names, _ := d.names(".spare")
	for _, name := range names {
		id := strings.TrimSuffix(name, ".spare")
		if id == keep || !ValidKernelID(id) {
			continue
		}
		sp, err := d.readSpare(id)
		switch {
		case err != nil:
			continue // not ours to judge
		case sp.Off != "":
			if d.liveRecord(id) {
				continue
			}
		case d.ReadSpare(id) != nil:
			continue // a live standby's
		}
		if d.remove(name) == nil {
			n++
		}
	}
	socks, _ := d.names(".standby")
	for _, name := range socks {
		id := strings.TrimSuffix(name, ".standby")
		if id == keep || !ValidKernelID(id) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(d.fd(), SpareName(id), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			continue // a standby records its spare before it listens
		}
		if unix.Fstatat(d.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil ||
			st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != d.uid {
			continue
		}
		if d.remove(name) == nil {
			n++
		}
	}
	return n
}

// finishSpare removes what a finished kernel's standby left: its spare's
// record and its socket, once the standby, its watcher and the spare the
// record names are gone (verified in /proc: none alive with its recorded
// start time), which is how a Slurm job's end or any SIGKILL of the whole
// tree leaves them. With forGood (the kernel ends for good: `stop`) a live
// standby, one of the kernel's processes (census.go), is stopped first —
// SIGTERM, which discards its spare and removes its files itself; SIGKILL
// to it and its spare once ctx is done — and the record that the kernel
// keeps no spare goes too; without, that record is kept for the kernel's
// next supervisors and a live standby is left alone with its socket. A
// record that does not parse is not judged here (SweepSpares leaves it
// too). It returns how many processes it killed.
func (d *Dir) finishSpare(ctx context.Context, id string, forGood bool) int {
	sp, err := d.readSpare(id)
	killed := 0
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A socket without a record: a standby records its spare before
		// it listens and removes the record only as it is adopted,
		// closing the socket right after.
	case err != nil:
		return 0
	case sp.Off != "":
		if !forGood {
			return 0
		}
	default:
		procs := []proc.Ref{{PID: sp.StandbyPID, Start: sp.StandbyStart}, {PID: sp.PID, Start: sp.Start}}
		if sp.Watcher != nil {
			procs = append(procs, *sp.Watcher)
		}
		live := func() bool {
			return slices.ContainsFunc(procs, func(p proc.Ref) bool { return aliveSince(p.PID, p.Start) })
		}
		if live() && forGood {
			killed = d.stopStandby(ctx, sp, live)
		}
		if live() {
			return killed
		}
	}
	if sp != nil {
		_ = d.remove(SpareName(id))
	}
	var st unix.Stat_t
	if unix.Fstatat(d.fd(), StandbyName(id), &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFSOCK && int(st.Uid) == d.uid {
		_ = d.remove(StandbyName(id))
	}
	return killed
}

// stopStandby stops the standby and spare sp names, the directory
// owner's processes with the recorded start times only: SIGTERM to the
// standby, then, once ctx is done, SIGKILL to both; it waits until live
// says none is left or ctx is done, and returns how many it killed.
func (d *Dir) stopStandby(ctx context.Context, sp *Spare, live func() bool) int {
	mine := func(pid int, start uint64) bool { return aliveSince(pid, start) && proc.Owner(pid) == d.uid }
	if mine(sp.StandbyPID, sp.StandbyStart) {
		_ = unix.Kill(sp.StandbyPID, unix.SIGTERM)
	}
	for live() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	killed := 0
	for _, p := range []proc.Ref{{PID: sp.StandbyPID, Start: sp.StandbyStart}, {PID: sp.PID, Start: sp.Start}} {
		if mine(p.PID, p.Start) && unix.Kill(p.PID, unix.SIGKILL) == nil {
			killed++
		}
	}
	for deadline := time.Now().Add(time.Second); live() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return killed
}

// liveRecord reports whether d holds a record of kernel id whose
// supervisor is alive.
func (d *Dir) liveRecord(id string) bool {
	b, err := d.read(stateName(id))
	if err != nil {
		return false
	}
	var st State
	if json.Unmarshal(b, &st) != nil {
		return false
	}
	st.Owner = d.uid
	return st.SupervisorAlive()
}
