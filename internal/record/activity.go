package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A kernel's execution state, as ps and `stop --idle-for` see it, is
// published by its supervisor in a small file next to its record,
// ID.activity, that the supervisor maps into memory: a cell starting or
// ending is one atomic store, no system call, so the relay's hot path
// (every execute_request and execute_reply) pays nothing for it
// (docs/operating.md#idle-kernels). The record itself is rewritten only on
// phase changes.
//
// The file is 24 bytes:
//
//	[0:8]   activityMagic
//	[8:16]  the supervisor's pid (native byte order)
//	[16:24] the state word (native byte order), stored atomically:
//	        the Unix time in milliseconds of the last change << 1 | busy
const (
	activityMagic = "tfgpuAc1"
	activitySize  = 24
)

// Execution states of a kernel, as ps shows them.
const (
	ExecBusy    = "busy"    // a cell is running (an execute_request has no reply yet)
	ExecIdle    = "idle"    // no cell is running
	ExecUnknown = "unknown" // nothing (valid) published: a supervisor of an older version, or gone
)

// Activity is a kernel's execution state and since when it has been in
// it: for an idle kernel, when its last cell ended (or, with none yet,
// when it started).
type Activity struct {
	Busy  bool
	Since time.Time
}

// State is ExecBusy or ExecIdle.
func (a Activity) State() string {
	if a.Busy {
		return ExecBusy
	}
	return ExecIdle
}

func activityName(id string) string { return id + ".activity" }

// ActivityWriter publishes a kernel's execution state. Its methods may be
// called from any goroutine; a nil writer does nothing.
type ActivityWriter struct {
	mem  []byte
	word *atomic.Uint64
}

// PublishActivity creates kernel id's activity file (0600, replacing any
// earlier supervisor's), maps it, and publishes idle since since.
func (d *Dir) PublishActivity(id string, since time.Time) (*ActivityWriter, error) {
	b := make([]byte, activitySize)
	copy(b, activityMagic)
	binary.NativeEndian.PutUint64(b[8:], uint64(os.Getpid()))
	binary.NativeEndian.PutUint64(b[16:], activityWord(false, since))
	f, err := d.create(activityName(id), b)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	mem, err := unix.Mmap(int(f.Fd()), 0, activitySize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = d.remove(activityName(id))
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	// The mapping is page-aligned, so the word at offset 16 is 8-aligned:
	// a store is atomic for every reader of the page.
	return &ActivityWriter{mem: mem, word: (*atomic.Uint64)(unsafe.Pointer(&mem[16]))}, nil
}

// Set publishes busy (a cell started) or idle (the last one ended), at.
func (a *ActivityWriter) Set(busy bool, at time.Time) {
	if a == nil {
		return
	}
	a.word.Store(activityWord(busy, at))
}

// Close unmaps the file; the file itself is removed with the record
// (Dir.Remove).
func (a *ActivityWriter) Close() {
	if a == nil || a.mem == nil {
		return
	}
	_ = unix.Munmap(a.mem)
	a.mem, a.word = nil, nil
}

func activityWord(busy bool, at time.Time) uint64 {
	w := uint64(at.UnixMilli()) << 1
	if busy {
		w |= 1
	}
	return w
}

// ParseActivity reads an activity file's content as the supervisor with
// pid supervisor wrote it. It is what another user may have planted:
// anything but the exact shape, a pid that is not the record's, or a time
// not in [2020, now + 1 min] is refused.
func ParseActivity(b []byte, supervisor int, now time.Time) (Activity, error) {
	switch {
	case len(b) != activitySize:
		return Activity{}, fmt.Errorf("%d bytes, not %d", len(b), activitySize)
	case !bytes.Equal(b[:8], []byte(activityMagic)):
		return Activity{}, errors.New("not an activity file")
	case supervisor <= 0 || binary.NativeEndian.Uint64(b[8:]) != uint64(supervisor):
		return Activity{}, fmt.Errorf("written by pid %d, not by the record's supervisor %d",
			binary.NativeEndian.Uint64(b[8:]), supervisor)
	}
	w := binary.NativeEndian.Uint64(b[16:])
	ms := int64(w >> 1)
	if ms < activityEpoch || ms > now.Add(time.Minute).UnixMilli() {
		return Activity{}, fmt.Errorf("time %d ms is not a time of this host's", ms)
	}
	return Activity{Busy: w&1 == 1, Since: time.UnixMilli(ms).UTC()}, nil
}

// activityEpoch: 2020-01-01 in Unix milliseconds; no supervisor wrote before.
const activityEpoch = 1577836800000

// readActivity reads the activity file of st's kernel, which d holds.
// The supervisor stores the word while this reads it, and a read of a
// file is not one atomic load: two reads that agree are taken.
func (d *Dir) readActivity(st State) (Activity, error) {
	var prev []byte
	for range 4 {
		b, err := d.read(activityName(st.KernelID))
		if err != nil {
			return Activity{}, err
		}
		if prev != nil && bytes.Equal(prev, b) {
			return ParseActivity(b, st.SupervisorPID, time.Now())
		}
		prev = b
	}
	return Activity{}, errors.New("changing too fast to read")
}

// removeActivity removes kernel id's activity file if supervisor wrote it.
func (d *Dir) removeActivity(id string, supervisor int) {
	b, err := d.read(activityName(id))
	if err == nil && len(b) == activitySize && bytes.Equal(b[:8], []byte(activityMagic)) &&
		binary.NativeEndian.Uint64(b[8:]) == uint64(supervisor) {
		_ = d.remove(activityName(id))
	}
}

// ReadActivity reads the activity file of st's kernel again, now: what
// `stop --idle-for` checks just before it stops a kernel.
func ReadActivity(st State) (Activity, error) {
	d, err := OpenDir(st.Dir, false, true)
	if err != nil {
		return Activity{}, err
	}
	defer d.Close()
	return d.readActivity(st)
}
