package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// How root finds every user's kernels (docs/security.md#threats, class 2):
// from what runs, not from what users wrote. Every process of a kernel
// that is this program is named tfgpu-kernel (the launched `run`, a
// standby, the watchers); a supervisor holds its state directory open for
// its whole life, so root reads the records through that descriptor
// (/proc/PID/fd/N: the very directory, whatever path or TFGPU_STATE_DIR
// the user chose, no path walked, no automount touched), each directory
// once however many of its user's processes hold it, and takes a record
// only when the process it names as its supervisor, with its start time,
// is one of those holding that directory. Which process plays which role
// is then Census's to say, from the records: the discovery parses no
// command line. Records in the users' runtime directories
// (/run/user/UID/tfgpu-kernel) are read too, for kernels whose supervisor
// is gone, at most maxUserRecords per directory; a record there that
// names a live process which is not a holder found this way is a claim
// nothing backs, and ignored. So a hidden state directory hides no
// running kernel, and planted records cost root a bounded read, never a
// scan each.

// maxUserRecords bounds the records root reads from one user's runtime
// directory (a user has a few kernels; more is a flood).
const maxUserRecords = 16

// maxHeldRecords bounds the records read from one state directory a
// running supervisor holds open.
const maxHeldRecords = 64

// maxSupervisorFDs bounds the descriptors looked at per process for its
// state directory: a supervisor, standby or stub opens it first thing (its
// number is below 10 after the runtime's own), so a process with more is
// looked at no further than that.
const maxSupervisorFDs = 32

// Supervisor is a kernel's supervisor as its record names it.
type Supervisor struct {
	PID      int
	Start    uint64
	UID      int
	KernelID string
}

// heldDir is a state directory that running tfgpu-kernel processes of
// one user hold open.
type heldDir struct {
	key     dirKey
	uid     int
	links   []string         // /proc/PID/fd/N of each holder, in pid order
	path    string           // what the first link reads
	holders map[procKey]bool // the processes holding it
}

// errHoldersGone: every process found holding a state directory exited,
// or closed it, before the directory was opened.
var errHoldersGone = errors.New("no process holds the state directory any more")

type dirKey struct{ dev, ino uint64 }

type procKey struct {
	pid   int
	start uint64
}

// heldDirs finds the state directories the live tfgpu-kernel processes of
// uid (every user's when uid < 0) hold open: directories of the process's
// owner with no permission for others, each listed once.
func heldDirs(sn *proc.Snapshot, uid int, spent budgets) []*heldDir {
	byKey := map[dirKey]*heldDir{}
	var order []dirKey
	pids := sn.Pids()
	slices.Sort(pids)
	for _, pid := range pids {
		p, ok := sn.Proc(pid)
		if !ok || !p.Alive() || sn.Comm(pid) != "tfgpu-kernel" {
			continue
		}
		owner := sn.Owner(pid)
		if owner < 0 || (uid >= 0 && owner != uid) || !spent.of(owner).proc() {
			continue
		}
		for _, fd := range dirFDs(pid, owner) {
			h := byKey[fd.key]
			if h == nil {
				if !spent.of(owner).dir() {
					continue
				}
				h = &heldDir{key: fd.key, uid: owner, path: fd.path, holders: map[procKey]bool{}}
				byKey[fd.key] = h
				order = append(order, fd.key)
			}
			if h.uid == owner {
				h.holders[procKey{pid, p.Start}] = true
				h.links = append(h.links, fd.link)
			}
		}
	}
	out := make([]*heldDir, 0, len(order))
	for _, k := range order {
		out = append(out, byKey[k])
	}
	return out
}

type dirFD struct {
	key        dirKey
	link, path string
}

// dirFDs lists the directories among pid's first maxSupervisorFDs
// descriptors that belong to owner and give others no permission.
func dirFDs(pid, owner int) []dirFD {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil
	}
	fds := make([]int, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, n)
		}
	}
	slices.Sort(fds)
	var out []dirFD
	for _, n := range fds[:min(len(fds), maxSupervisorFDs)] {
		link := fdDir + "/" + strconv.Itoa(n)
		target, err := os.Readlink(link)
		if err != nil || !strings.HasPrefix(target, "/") {
			continue // a socket, pipe, anon inode
		}
		var st unix.Stat_t
		if unix.Stat(link, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != owner || st.Mode&0o077 != 0 {
			continue
		}
		// A process's /proc/PID/fd is its owner's and 0500: a tfgpu-kernel
		// process reading another's descriptors holds one for a moment.
		// No state directory is on procfs.
		var fs unix.Statfs_t
		if unix.Statfs(link, &fs) != nil || fs.Type == unix.PROC_SUPER_MAGIC {
			continue
		}
		out = append(out, dirFD{key: dirKey{uint64(st.Dev), st.Ino}, link: link, path: target})
	}
	return out
}

// open opens the held directory through the descriptor of the first of
// its holders that still holds it, checking again that it is its user's
// and private. A holder may end, or close the directory and reuse the
// descriptor, between the scan and the open (a user's ps or doctor: once
// pids wrap, such a short-lived process may come before the supervisors
// in pid order), and the directory is still the other holders', its
// supervisors'. errHoldersGone when none holds it any more.
func (h *heldDir) open() (*Dir, error) {
	for _, link := range h.links {
		d, err := h.openLink(link)
		if errors.Is(err, errNotHeld) {
			continue
		}
		return d, err
	}
	return nil, errHoldersGone
}

// errNotHeld: a holder's descriptor is no longer the directory the scan
// found: the holder ended (ENOENT), or closed it and reused the
// descriptor for a file (ENOTDIR) or another directory.
var errNotHeld = errors.New("no longer held")

// openLink is open through one holder's descriptor.
func (h *heldDir) openLink(link string) (*Dir, error) {
	fd, err := unix.Open(link, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, errNotHeld
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	switch {
	case unix.Fstat(fd, &st) != nil || int(st.Uid) != h.uid || st.Mode&0o077 != 0:
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s changed while it was read", ErrRefused, h.path)
	case dirKey{uint64(st.Dev), st.Ino} != h.key:
		unix.Close(fd)
		return nil, errNotHeld
	}
	return &Dir{path: h.path, f: os.NewFile(uintptr(fd), h.path), uid: h.uid}, nil
}

// SupervisorDir opens the state directory st's supervisor holds open (the
// very directory, not a path that may have been swapped since), where its
// record names it: what root writes an Order into.
func SupervisorDir(st State) (*Dir, error) {
	s := Supervisor{PID: st.SupervisorPID, Start: st.SupervisorStart, UID: st.Owner, KernelID: st.KernelID}
	d, _, err := s.stateDir()
	return d, err
}

// stateDir finds the state directory s holds open with a record that names
// s, and returns it open with the record.
func (s Supervisor) stateDir() (*Dir, State, error) {
	for _, fd := range dirFDs(s.PID, s.UID) {
		h := &heldDir{key: fd.key, uid: s.UID, links: []string{fd.link}, path: fd.path}
		d, err := h.open()
		if err != nil {
			continue
		}
		rec, err := d.stateOf(s.KernelID)
		if err == nil && rec.SupervisorPID == s.PID && rec.SupervisorStart == s.Start {
			return d, rec, nil
		}
		d.Close()
	}
	return nil, State{}, fmt.Errorf("%w: supervisor %d (uid %d, kernel %s) holds no state directory with its record", ErrRefused, s.PID, s.UID, s.KernelID)
}

// stateOf reads and checks the record of kernel id in d.
func (d *Dir) stateOf(id string) (State, error) {
	name := stateName(id)
	b, err := d.read(name)
	if err != nil {
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, err
	}
	if st.KernelID != id {
		return State{}, refused("%s: holds kernel %s, not the kernel its name says", filepath.Join(d.path, name), Printable(st.KernelID))
	}
	if err := st.bound(); err != nil {
		return State{}, refused("%s: %v", filepath.Join(d.path, name), err)
	}
	st.Owner, st.Dir = d.uid, d.path
	if a, err := d.readActivity(st); err == nil {
		st.Activity = &a
	}
	return st, nil
}

// Collect returns the kernels ps, stop and the metrics act on, each
// once: the records in dir (the caller's own state directory: an error
// there is returned); those in the state directories the caller's
// running tfgpu-kernel processes hold open (whatever state directory each
// chose: another XDG_RUNTIME_DIR under su or cron, a TFGPU_STATE_DIR),
// or for root (allUsers) every user's; and for root what is left of
// kernels whose supervisor is gone in the users' runtime directories (see
// above). refused says what was left alone, one line each.
func Collect(dir string, allUsers bool) (states []State, refusals []error, err error) {
	states, refusals, err = ReadStates(dir)
	if err != nil {
		return states, refusals, err
	}
	sn, err := proc.TakeSnapshot()
	if err != nil {
		return states, refusals, nil // no /proc to read: the caller's own directory only
	}
	// The same record may be read twice (the caller's own directory is
	// also held by its supervisors): once is listed.
	type seen struct {
		Key
		procKey
	}
	have := map[seen]bool{}
	keyOf := func(st State) seen { return seen{st.Key(), procKey{st.SupervisorPID, st.SupervisorStart}} }
	for _, st := range states {
		have[keyOf(st)] = true
	}
	holding := map[procKey]bool{} // every process found holding a state directory
	only := -1
	if !allUsers {
		only = os.Geteuid()
	}
	spent := budgets{}
	defer func() { refusals = append(refusals, spent.refusals()...) }()
	for _, h := range heldDirs(sn, only, spent) {
		for k := range h.holders {
			holding[k] = true
		}
		d, err := h.open()
		if errors.Is(err, errHoldersGone) {
			continue // all of them ended since the scan: no supervisor of it runs
		}
		if err != nil {
			refusals = append(refusals, err)
			continue
		}
		sts, ref, err := d.statesUpTo(maxHeldRecords, spent.of(h.uid))
		d.Close()
		refusals = append(refusals, ref...)
		if err != nil {
			refusals = append(refusals, err)
			continue
		}
		for _, st := range sts {
			// Backed: its supervisor holds this very directory. A dead
			// supervisor's is what is left of its kernel, shown dirty.
			backed := h.holders[procKey{st.SupervisorPID, st.SupervisorStart}]
			if have[keyOf(st)] || (!backed && st.SupervisorAlive()) {
				continue
			}
			have[keyOf(st)] = true
			states = append(states, st)
		}
	}
	if !allUsers {
		return states, refusals, nil
	}
	dirs, _ := filepath.Glob("/run/user/*/tfgpu-kernel")
	for _, d := range uniqueDirs(dir, dirs)[1:] {
		sts, ref, err := readUserStates(d, spent)
		refusals = append(refusals, ref...)
		if err != nil {
			refusals = append(refusals, err)
			continue
		}
		unbacked := 0
		for _, st := range sts {
			switch {
			case have[keyOf(st)]:
			case st.SupervisorAlive() && !holding[procKey{st.SupervisorPID, st.SupervisorStart}]:
				unbacked++ // names a live process that is no supervisor
			default:
				have[keyOf(st)] = true
				states = append(states, st)
			}
		}
		if unbacked > 0 {
			refusals = append(refusals, refused("%s: %d records name live processes that are not tfgpu-kernel supervisors: ignored", d, unbacked))
		}
	}
	return states, refusals, nil
}

// readUserStates reads the records of another user's directory d, at most
// maxUserRecords of them, within what its owner's share (spent) leaves.
func readUserStates(dir string, spent budgets) ([]State, []error, error) {
	d, err := OpenDir(dir, false, true)
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	return d.statesUpTo(maxUserRecords, spent.of(d.uid))
}

// statesUpTo is States, reading at most max records, and no more than the
// owner's share s leaves (nil: no share to keep).
func (d *Dir) statesUpTo(max int, s *spend) ([]State, []error, error) {
	limit := max
	if s != nil {
		limit = min(max, s.recordsLeft())
	}
	names, err := d.namesUpTo(".json", limit+1)
	if err != nil {
		return nil, nil, err
	}
	var ref []error
	if len(names) > limit {
		// In the directory's order, the rest unread: a flood hides only its
		// planter's own.
		if limit == max {
			ref = append(ref, refused("%s: more than %d records, more than a user's kernels: read %d of them", d.path, max, max))
		} else if s != nil {
			s.ranOut(fmt.Sprintf("%d records", uidMaxRecords))
		}
		names = names[:limit]
	}
	sts, r := d.statesNamed(names, s)
	return sts, append(ref, r...), nil
}
