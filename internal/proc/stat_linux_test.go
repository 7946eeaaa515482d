package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

const statTail = " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 424242 19 20 21 22 23\n"

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Stat
		wantErr bool
	}{
		{name: "plain", line: "42 (python3) S 7 42" + statTail,
			want: Stat{PID: 42, State: 'S', PPid: 7, Pgrp: 42, Start: 424242, Comm: comm("python3")}},
		{name: "comm with spaces and parens", line: "43 (a) b (c)) Z 1 9" + statTail,
			want: Stat{PID: 43, State: 'Z', PPid: 1, Pgrp: 9, Start: 424242, Comm: comm("a) b (c)")}},
		{name: "comm of only ')'", line: "44 ())) T 2 3" + statTail,
			want: Stat{PID: 44, State: 'T', PPid: 2, Pgrp: 3, Start: 424242, Comm: comm("))")}},
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
	r := StatReader{Root: "/proc"}
	s, ok, err := r.Read(os.Getpid())
	if err != nil || !ok || s.PID != os.Getpid() || s.PPid != os.Getppid() || !s.Alive() {
		t.Fatalf("read self = %+v, %v, %v", s, ok, err)
	}
	if _, ok, err := r.Read(1 << 30); ok || err != nil {
		t.Errorf("read of a pid that cannot exist = %v, %v; want not ok, nil", ok, err)
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

func TestMeminfoField(t *testing.T) {
	b := []byte("MemTotal:       24683664 kB\nPss:  100 kB\nBad: x kB\nNeg: -5 kB\n")
	for key, want := range map[string]int64{"MemTotal:": 24683664, "Pss:": 100} {
		if got, ok := meminfoField(b, key); !ok || got != want {
			t.Errorf("%s = %d, %v", key, got, ok)
		}
	}
	for _, key := range []string{"Bad:", "Neg:", "Missing:"} {
		if _, ok := meminfoField(b, key); ok {
			t.Errorf("%s accepted", key)
		}
	}
}
