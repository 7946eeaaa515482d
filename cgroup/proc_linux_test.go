package cgroup

import (
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

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
