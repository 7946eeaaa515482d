package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
)

// How root finds every user's kernels (docs/security.md#threats, class 2):
// from what runs, not from what users wrote. A supervisor is a live process
// named tfgpu-kernel running `run`; it holds its state directory open for
// its whole life, so root reads its record through that descriptor
// (/proc/PID/fd/N: the very directory, whatever path or TFGPU_STATE_DIR the
// user chose, no path walked, no automount touched) and takes it only when
// the record names that process, with its start time. Records in the
// users' runtime directories (/run/user/UID/tfgpu-kernel) are read too, for
// kernels whose supervisor is gone, at most maxUserRecords per directory;
// a record there that names a live process which is not a supervisor
// found this way is a claim nothing backs, and ignored. So a hidden state
// directory hides no running kernel, and planted records cost root a
// bounded read, never a scan each.

// maxUserRecords bounds the records root reads from one user's runtime
// directory (a user has a few kernels; more is a flood).
const maxUserRecords = 16

// maxSupervisorFDs bounds the descriptors looked at per supervisor for its
// state directory (it opens it first thing, so its number is small).
const maxSupervisorFDs = 64

// Supervisor is a supervisor process running on this host.
type Supervisor struct {
	PID      int
	Start    uint64
	UID      int
	KernelID string
}

// IDFunc returns the kernel id a supervisor runs, from its command line
// (argv[0] is the program) and working directory; "" when argv is not a
// `run` command. The command package provides it: it parses run's flags
// exactly as run does.
type IDFunc func(argv []string, cwd string) string

// Supervisors lists the supervisors running on this host, from sn: every
// user's when uid < 0, else uid's.
func Supervisors(sn *cgroup.Snapshot, idOf IDFunc, uid int) []Supervisor {
	var out []Supervisor
	for _, pid := range sn.Pids() {
		p, ok := sn.Proc(pid)
		if !ok || !p.Alive() || sn.Comm(pid) != "tfgpu-kernel" || (uid >= 0 && sn.Owner(pid) != uid) {
			continue
		}
		argv, err := cgroup.ProcCmdline(pid)
		if err != nil || len(argv) < 2 || argv[1] != "run" {
			continue
		}
		cwd, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
		id := idOf(argv, cwd)
		if !ValidKernelID(id) {
			continue
		}
		out = append(out, Supervisor{PID: pid, Start: p.Start, UID: sn.Owner(pid), KernelID: id})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// Record reads s's record through the state directory s holds open, and
// checks that it names s.
func (s Supervisor) Record() (State, error) {
	d, rec, err := s.stateDir()
	if err != nil {
		return State{}, err
	}
	d.Close()
	return rec, nil
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
	fdDir := fmt.Sprintf("/proc/%d/fd", s.PID)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, State{}, err
	}
	fds := make([]int, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, n)
		}
	}
	slices.Sort(fds)
	seen := false // a record of this kernel, whether or not it named s
	for _, n := range fds[:min(len(fds), maxSupervisorFDs)] {
		link := fdDir + "/" + strconv.Itoa(n)
		target, err := os.Readlink(link)
		if err != nil || !strings.HasPrefix(target, "/") {
			continue // a socket, pipe, anon inode
		}
		fd, err := unix.Open(link, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue // not a directory
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || int(st.Uid) != s.UID || st.Mode&0o077 != 0 {
			unix.Close(fd)
			continue
		}
		d := &Dir{path: target, f: os.NewFile(uintptr(fd), target), uid: s.UID}
		rec, err := d.stateOf(s.KernelID)
		if err == nil && rec.SupervisorPID == s.PID && rec.SupervisorStart == s.Start {
			return d, rec, nil
		}
		seen = seen || !errors.Is(err, os.ErrNotExist)
		d.Close()
	}
	if !seen {
		return nil, State{}, errNoRecord // not written yet (starting), or gone (stopping)
	}
	return nil, State{}, fmt.Errorf("%w: supervisor %d (uid %d, kernel %s) holds no state directory with its record", ErrRefused, s.PID, s.UID, s.KernelID)
}

// errNoRecord: a supervisor holds no record of its kernel, which it has
// not written yet or has removed: nothing to show, nothing to say.
var errNoRecord = errors.New("no record")

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
	st.Owner, st.Dir = d.uid, d.path
	if a, err := d.readActivity(st); err == nil {
		st.Activity = &a
	}
	return st, nil
}

// Collect returns the kernels ps, stop and the metrics act on: the records
// in dir (the caller's own state directory: an error there is returned);
// every running supervisor's of the caller's (whatever state directory
// each chose: another XDG_RUNTIME_DIR under su or cron, a
// TFGPU_STATE_DIR), or for root (allUsers) of every user's; and for root
// what is left of kernels whose supervisor is gone in the users' runtime
// directories (see above). refused says what was left alone, one line
// each.
func Collect(dir string, allUsers bool, idOf IDFunc) (states []State, refusals []error, err error) {
	states, refusals, err = ReadStates(dir)
	if err != nil {
		return states, refusals, err
	}
	sn, err := cgroup.TakeSnapshot()
	if err != nil {
		return states, refusals, nil // no /proc to read: the caller's own directory only
	}
	type live struct {
		pid   int
		start uint64
	}
	have := map[live]bool{}
	for _, st := range states {
		have[live{st.SupervisorPID, st.SupervisorStart}] = true
	}
	running := map[live]bool{}
	only := -1
	if !allUsers {
		only = os.Geteuid()
	}
	for _, s := range Supervisors(sn, idOf, only) {
		running[live{s.PID, s.Start}] = true
		if have[live{s.PID, s.Start}] {
			continue
		}
		st, err := s.Record()
		if errors.Is(err, errNoRecord) {
			continue
		}
		if err != nil {
			refusals = append(refusals, err)
			continue
		}
		have[live{s.PID, s.Start}] = true
		states = append(states, st)
	}
	if !allUsers {
		return states, refusals, nil
	}
	dirs, _ := filepath.Glob("/run/user/*/tfgpu-kernel")
	for _, d := range uniqueDirs(dir, dirs)[1:] {
		sts, ref, err := readUserStates(d)
		refusals = append(refusals, ref...)
		if err != nil {
			refusals = append(refusals, err)
			continue
		}
		unbacked := 0
		for _, st := range sts {
			switch k := (live{st.SupervisorPID, st.SupervisorStart}); {
			case have[k]:
			case st.SupervisorAlive() && !running[k]:
				unbacked++ // names a live process that is no supervisor
			default:
				have[k] = true
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
// maxUserRecords of them.
func readUserStates(dir string) ([]State, []error, error) {
	d, err := OpenDir(dir, false, true)
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	names, err := d.namesUpTo(".json", maxUserRecords+1)
	if err != nil {
		return nil, nil, err
	}
	var ref []error
	if len(names) > maxUserRecords {
		// In the directory's order, the rest unread: a flood hides only its
		// planter's own.
		ref = append(ref, refused("%s: more than %d records, more than a user's kernels: read %d of them", dir, maxUserRecords, maxUserRecords))
		names = names[:maxUserRecords]
	}
	sts, r := d.statesNamed(names)
	return sts, append(ref, r...), nil
}
