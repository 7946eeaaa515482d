package proc

import (
	"slices"
	"testing"
)

// TestMembership runs the membership rules over a made-up /proc: supervisor
// 100, leader 200.
func TestMembership(t *testing.T) {
	p := func(pid int, state byte, ppid, pgrp int) Stat {
		return Stat{PID: pid, State: state, PPid: ppid, Pgrp: pgrp}
	}
	base := []Stat{
		p(1, 'S', 0, 1), p(50, 'S', 1, 50), // init, and the supervisor's parent
		p(100, 'S', 50, 100),  // supervisor
		p(200, 'S', 100, 200), // leader
		p(201, 'S', 200, 200), // child
		p(202, 'R', 201, 200), // grandchild
		p(300, 'S', 100, 300), // orphan daemon re-parented to the supervisor (setsid)
		p(301, 'S', 300, 300), // its child
		p(400, 'S', 1, 200),   // escaped to init but still in the leader's group
		p(500, 'S', 100, 500), // another child of the supervisor (excluded)
		p(501, 'S', 500, 500), // its child
		p(600, 'S', 50, 600),  // unrelated
	}
	tests := []struct {
		name    string
		leader  int
		procs   []Stat
		exclude func(int) bool
		want    []int
	}{
		{name: "all rules", leader: 200, procs: base, exclude: func(pid int) bool { return pid == 500 },
			want: []int{200, 201, 202, 300, 301, 400}},
		{name: "no exclude claims every child", leader: 200, procs: base,
			want: []int{200, 201, 202, 300, 301, 400, 500, 501}},
		{name: "leader never excluded", leader: 200, procs: base, exclude: func(int) bool { return true },
			want: []int{200, 201, 202, 400}},
		{name: "zombies are dead but link", leader: 200,
			procs: []Stat{p(100, 'S', 1, 100), p(200, 'Z', 100, 200), p(210, 'S', 200, 210), p(211, 'X', 210, 211)},
			want:  []int{210}},
		{name: "not started", leader: 0, procs: base, want: nil},
		{name: "pid reuse loop", leader: 200,
			procs: []Stat{p(100, 'S', 1, 100), p(700, 'S', 701, 700), p(701, 'S', 700, 701)},
			want:  nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			procs := make(map[int]Stat)
			for _, s := range tc.procs {
				procs[s.PID] = s
			}
			m := membership{procs: procs, self: 100, leader: tc.leader, exclude: tc.exclude}
			got, err := m.live()
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("live = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestMembershipParentVanished: the scan read 800 while its parent 700 was
// alive, then 700 was reaped before its directory was read; 800 is read
// again and found re-parented to the supervisor.
func TestMembershipParentVanished(t *testing.T) {
	procs := map[int]Stat{
		100: {PID: 100, State: 'S', PPid: 1, Pgrp: 100},
		200: {PID: 200, State: 'S', PPid: 100, Pgrp: 200},
		800: {PID: 800, State: 'S', PPid: 700, Pgrp: 800},
	}
	reread := func(pid int) (Stat, bool, error) {
		if pid != 800 {
			t.Errorf("reread(%d)", pid)
		}
		return Stat{PID: 800, State: 'S', PPid: 100, Pgrp: 800}, true, nil
	}
	m := membership{procs: procs, self: 100, leader: 200, reread: reread}
	if got, err := m.live(); err != nil || !slices.Equal(got, []int{200, 800}) {
		t.Errorf("live = %v, %v; want [200 800]", got, err)
	}
}
