package cgroup

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

func TestKillTree(t *testing.T) {
	tests := []struct {
		name   string
		mode   string
		extra  []string
		ready  int                          // processes reported before Kill
		before func(t *testing.T, tr *tree) // after ready, before Kill
	}{
		{name: "plain child", mode: "sleep", ready: 1},
		{name: "child ignoring SIGTERM", mode: "ignore-term", ready: 1},
		{name: "setsid double-forked daemon ignoring SIGTERM", mode: "daemon", ready: 3, before: daemonEscaped},
		{name: "forks a child every 10ms", mode: "forker", ready: 6},
		{name: "SIGSTOPped leader", mode: "sleep", ready: 1, before: stopLeader},
		{name: "64 threads", mode: "threads", ready: 1},
		{name: "tree of 20 processes", mode: "tree", extra: []string{envNode + "=0", envNodes + "=20"}, ready: 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			orphansBefore := testReaper.Orphans()
			tr := startTree(t, tc.mode, tc.extra...)
			ids := waitReported(t, tr.pidfile, tc.ready)
			if tc.before != nil {
				tc.before(t, tr)
			}
			killChecked(t, tr, ids)

			es := tr.exitStatus(t)
			if es.String() != "signal SIGKILL" || es.Code() != 137 || es.Pid != tr.leader {
				t.Errorf("leader exit = %d %q code %d, want %d \"signal SIGKILL\" 137", es.Pid, es, es.Code(), tr.leader)
			}
			all := readPidfile(t, tr.pidfile) // the forker reported more while dying
			if alive := aliveIDs(t, all); len(alive) > 0 {
				t.Errorf("alive after Kill: %v (of %d ever in the tree)", alive, len(all))
			}
			if pids, err := tr.Pids(); err != nil || len(pids) != 0 {
				t.Errorf("Pids after Kill = %v, %v; want none", pids, err)
			}
			if n, err := tr.Kill(context.Background()); n != 0 || err != nil {
				t.Errorf("second Kill = %d, %v; want 0, nil", n, err)
			}
			waitNoZombies(t)
			if tc.mode == "daemon" && testReaper.Orphans() <= orphansBefore {
				t.Errorf("Reaper reaped no orphan (%d before, %d after)", orphansBefore, testReaper.Orphans())
			}
		})
	}
}

// daemonEscaped waits until the daemon has left the leader's process group
// and parent chain: re-parented to the test process, a subreaper.
func daemonEscaped(t *testing.T, tr *tree) {
	ids := waitReported(t, tr.pidfile, 3)
	daemon := ids[2].pid
	r := proc.StatReader{Root: "/proc"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, ok, err := r.Read(daemon)
		if err != nil || !ok {
			t.Fatalf("daemon %d: ok=%v %v", daemon, ok, err)
		}
		// The middle process must be reaped too (by the leader's wait4):
		// while it is a zombie a scan may still list it, and a Kill just
		// after finds it gone and kills one fewer than the scan saw.
		_, midLeft, _ := r.Read(ids[1].pid)
		if s.PPid == os.Getpid() && s.Pgrp != tr.leader && !midLeft {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon %d: ppid %d pgrp %d, want re-parented to %d outside group %d",
				daemon, s.PPid, s.Pgrp, os.Getpid(), tr.leader)
		}
		time.Sleep(time.Millisecond)
	}
}

// stopLeader SIGSTOPs the leader and waits until it is stopped.
func stopLeader(t *testing.T, tr *tree) {
	if err := unix.Kill(tr.leader, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r := proc.StatReader{Root: "/proc"}
	for deadline := time.Now().Add(10 * time.Second); ; {
		s, ok, err := r.Read(tr.leader)
		if err != nil || !ok {
			t.Fatalf("leader %d: ok=%v %v", tr.leader, ok, err)
		}
		if s.State == 'T' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader %d in state %c, want T", tr.leader, s.State)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKillAfterLeaderExited(t *testing.T) {
	tr := startTree(t, "exit3-orphan")
	ids := waitReported(t, tr.pidfile, 2)
	es := tr.exitStatus(t)
	if es.String() != "exit code 3" || es.Code() != 3 {
		t.Errorf("leader exit = %q code %d, want \"exit code 3\" 3", es, es.Code())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := tr.Kill(ctx); n != 1 || err != nil {
		t.Errorf("Kill = %d, %v; want 1 (the orphan), nil", n, err)
	}
	if n, err := tr.Kill(context.Background()); n != 0 || err != nil {
		t.Errorf("second Kill = %d, %v; want 0, nil", n, err)
	}
	if alive := aliveIDs(t, ids); len(alive) > 0 {
		t.Errorf("alive after Kill: %v", alive)
	}
	waitNoZombies(t)
}

func TestKillCanceledContextStillKills(t *testing.T) {
	tr := startTree(t, "sleep")
	ids := waitReported(t, tr.pidfile, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.Kill(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Kill = %v, want nil or wrapping context.Canceled", err)
	}
	if es := tr.exitStatus(t); es.Code() != 137 {
		t.Errorf("leader exit = %q, want signal SIGKILL", es)
	}
	if alive := aliveIDs(t, ids); len(alive) > 0 {
		t.Errorf("alive after Kill: %v", alive)
	}
}

func TestTreeLifecycle(t *testing.T) {
	ctx := context.Background()
	tr := NewProcTree(os.Getpid())
	if tr.Mode() != ModeProc {
		t.Errorf("Mode = %q", tr.Mode())
	}
	if n, err := tr.Kill(context.Background()); n != 0 || err != nil {
		t.Errorf("Kill before Started = %d, %v; want 0, nil", n, err)
	}
	if pids, err := tr.Pids(); len(pids) != 0 || err != nil {
		t.Errorf("Pids before Started = %v, %v", pids, err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := tr.Kill(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Kill after Close = %v, want ErrClosed", err)
	}
	if _, err := tr.Pids(); !errors.Is(err, ErrClosed) {
		t.Errorf("Pids after Close = %v, want ErrClosed", err)
	}
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		name    string
		attr    *syscall.SysProcAttr
		wantErr bool
	}{
		{name: "keeps Pdeathsig", attr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}},
		{name: "nil", attr: nil, wantErr: true},
		{name: "Setsid conflicts", attr: &syscall.SysProcAttr{Setsid: true}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before syscall.SysProcAttr
			if tc.attr != nil {
				before = *tc.attr
			}
			err := NewProcTree(os.Getpid()).Configure(tc.attr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Configure = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			want := before
			want.Setpgid, want.Pgid = true, 0
			if tc.attr.Pdeathsig != want.Pdeathsig || !tc.attr.Setpgid || tc.attr.Pgid != 0 {
				t.Errorf("Configure set %+v, want %+v", *tc.attr, want)
			}
		})
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
