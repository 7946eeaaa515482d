package cgroup

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

const statTail = " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 424242 19 20 21 22 23\n"

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{name: "plain", line: "42 (python3) S 7 42" + statTail,
			want: procStat{pid: 42, state: 'S', ppid: 7, pgrp: 42, start: 424242, comm: comm("python3")}},
		{name: "comm with spaces and parens", line: "43 (a) b (c)) Z 1 9" + statTail,
			want: procStat{pid: 43, state: 'Z', ppid: 1, pgrp: 9, start: 424242, comm: comm("a) b (c)")}},
		{name: "comm of only ')'", line: "44 ())) T 2 3" + statTail,
			want: procStat{pid: 44, state: 'T', ppid: 2, pgrp: 3, start: 424242, comm: comm("))")}},
		{name: "no comm", line: "45 S 1 1", wantErr: true},
		{name: "truncated", line: "46 (x) S 1", wantErr: true},
		{name: "bad ppid", line: "47 (x) S y 1" + statTail, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.line))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStat = %+v, %v; wantErr %v", got, err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("parseStat = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func comm(s string) (c [16]byte) {
	copy(c[:], s)
	return c
}

func TestStatReaderSelf(t *testing.T) {
	r := statReader{root: "/proc"}
	s, ok, err := r.read(os.Getpid())
	if err != nil || !ok || s.pid != os.Getpid() || s.ppid != os.Getppid() || !s.alive() {
		t.Fatalf("read self = %+v, %v, %v", s, ok, err)
	}
	if _, ok, err := r.read(1 << 30); ok || err != nil {
		t.Errorf("read of a pid that cannot exist = %v, %v; want not ok, nil", ok, err)
	}
}

// TestMembership runs the membership rules over a made-up /proc: supervisor
// 100, leader 200.
func TestMembership(t *testing.T) {
	p := func(pid int, state byte, ppid, pgrp int) procStat {
		return procStat{pid: pid, state: state, ppid: ppid, pgrp: pgrp}
	}
	base := []procStat{
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
		procs   []procStat
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
			procs: []procStat{p(100, 'S', 1, 100), p(200, 'Z', 100, 200), p(210, 'S', 200, 210), p(211, 'X', 210, 211)},
			want:  []int{210}},
		{name: "not started", leader: 0, procs: base, want: nil},
		{name: "pid reuse loop", leader: 200,
			procs: []procStat{p(100, 'S', 1, 100), p(700, 'S', 701, 700), p(701, 'S', 700, 701)},
			want:  nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			procs := make(map[int]procStat)
			for _, s := range tc.procs {
				procs[s.pid] = s
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
	procs := map[int]procStat{
		100: {pid: 100, state: 'S', ppid: 1, pgrp: 100},
		200: {pid: 200, state: 'S', ppid: 100, pgrp: 200},
		800: {pid: 800, state: 'S', ppid: 700, pgrp: 800},
	}
	reread := func(pid int) (procStat, bool, error) {
		if pid != 800 {
			t.Errorf("reread(%d)", pid)
		}
		return procStat{pid: 800, state: 'S', ppid: 100, pgrp: 800}, true, nil
	}
	m := membership{procs: procs, self: 100, leader: 200, reread: reread}
	if got, err := m.live(); err != nil || !slices.Equal(got, []int{200, 800}) {
		t.Errorf("live = %v, %v; want [200 800]", got, err)
	}
}

// BenchmarkScan measures one membership scan of this host's /proc.
func BenchmarkScan(b *testing.B) {
	tr := NewProcTree(os.Getpid()).(*procTree)
	for b.Loop() {
		if _, err := tr.scan(os.Getpid() + 1); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHasChildren: a process with none has none; one that left a child
// unreaped (a zombie, as a subprocess.Popen kept in a variable) has one.
func TestHasChildren(t *testing.T) {
	alone := exec.Command("sleep", "30")
	parent := exec.Command("/usr/bin/python3", "-c",
		"import subprocess, time\np = subprocess.Popen(['true'])\ntime.sleep(30)")
	for _, c := range []*exec.Cmd{alone, parent} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	if HasChildren(alone.Process.Pid) {
		t.Error("sleep has children")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !HasChildren(parent.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("a process with an unreaped child has none")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if HasChildren(1 << 30) {
		t.Error("a pid that does not exist has children")
	}
}
