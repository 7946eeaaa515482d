package proc

import "sort"

// membership decides, over one scan of /proc, which processes belong to the
// tree of leader, whose supervisor (a child subreaper) is self.
//
// A process is a member when
//   - it is in the leader's process group (pgrp == leader), or
//   - its parent is self and it is the leader or not excluded: the leader, or
//     an orphan of the tree re-parented to the subreaper (proc(5), prctl(2)
//     PR_SET_CHILD_SUBREAPER), or
//   - its parent is a member.
//
// A scan is not atomic: a process read with its old parent P may find P
// already reaped by the time P's directory is read (P > pid). The kernel
// re-parents a dying process's children before P becomes a zombie, so such a
// process is read again, and its fresh ppid is the subreaper's.
type membership struct {
	procs   map[int]Stat
	self    int
	leader  int
	exclude func(pid int) bool                // may be nil
	reread  func(pid int) (Stat, bool, error) // may be nil (tests)
	memo    map[int]bool
	err     error // first reread error
}

// Members returns the live members, sorted, of the tree of leader under the
// subreaper self (the membership rules above), over procs, one Scan of
// /proc; exclude may be nil; reread (may be nil) reads a process again
// whose parent vanished during the scan. procs is updated in place.
func Members(procs map[int]Stat, self, leader int, exclude func(pid int) bool, reread func(pid int) (Stat, bool, error)) ([]int, error) {
	m := membership{procs: procs, self: self, leader: leader, exclude: exclude, reread: reread}
	return m.live()
}

// live returns the live members, sorted.
func (m *membership) live() ([]int, error) {
	if m.leader <= 1 {
		return nil, nil
	}
	m.memo = make(map[int]bool)
	var pids []int
	for pid := range m.procs {
		if m.member(pid) {
			// Read the map again: member may have refreshed this entry.
			if s, ok := m.procs[pid]; ok && s.Alive() {
				pids = append(pids, pid)
			}
		}
	}
	sort.Ints(pids)
	return pids, m.err
}

func (m *membership) member(pid int) bool {
	if pid <= 1 || pid == m.self {
		return false
	}
	if v, ok := m.memo[pid]; ok {
		return v
	}
	m.memo[pid] = false // a pid that reappears on its own chain (pid reuse mid-scan) is not a member
	v := m.decide(pid)
	m.memo[pid] = v
	return v
}

func (m *membership) decide(pid int) bool {
	s, ok := m.procs[pid]
	if !ok {
		return false
	}
	if s.Pgrp == m.leader {
		return true
	}
	if s.PPid == m.self {
		return pid == m.leader || m.exclude == nil || !m.exclude(pid)
	}
	if _, ok := m.procs[s.PPid]; !ok && s.PPid > 1 && m.reread != nil {
		// The parent vanished during the scan: read this process again.
		fresh, ok, err := m.reread(pid)
		if err != nil && m.err == nil {
			m.err = err
		}
		if !ok {
			delete(m.procs, pid) // gone as well
			return false
		}
		m.procs[pid] = fresh
		if fresh.PPid != s.PPid {
			return m.decide(pid)
		}
	}
	return m.member(s.PPid)
}
