package record

import (
	"fmt"
	"slices"
	"strings"
)

// What root's discovery spends on one user at most (docs/security.md#threats,
// class 9). Anyone can start processes named tfgpu-kernel that hold
// directories full of records: before #33 ten such fakes of a 10-line C
// program took root's ps from 0.00 to 4.3–4.9 s, linearly, and a thousand
// stalled ps, the metrics, stop --idle-for and doctor for minutes. Now a
// user's processes, directories, records and record bytes each cost root
// at most these, however many there are, and what is left unread hides
// only that user's own kernels: every other user's are still listed.
// A user runs a few kernels; each is five tfgpu-kernel processes at most
// (the launched run or stub, the supervisor, the standby, two watchers),
// one state directory and a record of a few KB.
const (
	uidMaxProcs   = 128     // tfgpu-kernel processes whose descriptors are looked at (maxSupervisorFDs each)
	uidMaxDirs    = 16      // state directories opened
	uidMaxRecords = 64      // records read, over all of them
	uidMaxBytes   = 2 << 20 // bytes of records read
)

// spend is what discovery has spent on one user so far.
type spend struct {
	procs, dirs, records int
	bytes                int64
	over                 []string // what ran out
}

// budgets is spend per uid.
type budgets map[int]*spend

func (b budgets) of(uid int) *spend {
	s := b[uid]
	if s == nil {
		s = &spend{}
		b[uid] = s
	}
	return s
}

// ranOut notes that what ran out for s.
func (s *spend) ranOut(what string) {
	if !slices.Contains(s.over, what) {
		s.over = append(s.over, what)
	}
}

// proc takes one process to look at; false when the user's share is
// spent.
func (s *spend) proc() bool {
	if s.procs >= uidMaxProcs {
		s.ranOut(fmt.Sprintf("%d tfgpu-kernel processes", uidMaxProcs))
		return false
	}
	s.procs++
	return true
}

// dir takes one directory to open.
func (s *spend) dir() bool {
	if s.dirs >= uidMaxDirs {
		s.ranOut(fmt.Sprintf("%d state directories", uidMaxDirs))
		return false
	}
	s.dirs++
	return true
}

// recordsLeft is how many more records may be read.
func (s *spend) recordsLeft() int { return max(uidMaxRecords-s.records, 0) }

// record takes one record of n bytes, read already; false when it was
// one too many (it is then not used, nor any after it).
func (s *spend) record(n int) bool {
	if s.records >= uidMaxRecords {
		s.ranOut(fmt.Sprintf("%d records", uidMaxRecords))
		return false
	}
	if s.bytes+int64(n) > uidMaxBytes {
		s.ranOut(fmt.Sprintf("%d MiB of records", uidMaxBytes>>20))
		s.bytes = uidMaxBytes
		return false
	}
	s.records++
	s.bytes += int64(n)
	return true
}

// refusals says, one line per user, whose share ran out.
func (b budgets) refusals() []error {
	var out []error
	uids := make([]int, 0, len(b))
	for uid, s := range b {
		if len(s.over) > 0 {
			uids = append(uids, uid)
		}
	}
	slices.Sort(uids)
	for _, uid := range uids {
		out = append(out, refused("uid %d (%s) has more than %s, more than a user's kernels have: the rest was not read, and kernels of that user's may be missing",
			uid, UserName(uid), strings.Join(b[uid].over, ", ")))
	}
	return out
}
