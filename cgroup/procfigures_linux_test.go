package cgroup

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// The figures usage_reply gives of a tree: CPU time, PSS and the host's
// memory, read from a real process.
func TestProcFigures(t *testing.T) {
	// A child that burns 200 ms of CPU time itself (its own clock: under
	// load a wall-clock loop gets less), then waits to be read.
	cmd := exec.Command("python3", "-c", "import time\nwhile time.process_time() < 0.2: pass\ntime.sleep(30)")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var cpu time.Duration
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cpu = ProcCPU(cmd.Process.Pid); cpu >= 150*time.Millisecond {
			break
		}
	}
	if cpu < 150*time.Millisecond || cpu > 10*time.Second {
		t.Errorf("ProcCPU of a child that burnt ~200 ms: %v", cpu)
	}
	self := os.Getpid()
	if pss, rss := ProcPSS(self), ProcRSS(self); pss <= 0 || pss > rss+(1<<20) {
		t.Errorf("ProcPSS %d, ProcRSS %d: want 0 < PSS <= RSS", pss, rss)
	}
	if ProcCPU(1<<30) != 0 || ProcPSS(1<<30) != 0 {
		t.Error("figures for a pid that does not exist")
	}
	m, err := ReadHostMemory()
	if err != nil || m.Total <= 0 || m.Available <= 0 || m.Available > m.Total || m.Free > m.Total {
		t.Errorf("ReadHostMemory = %+v, %v", m, err)
	}
	tr := NewProcTree(self)
	defer tr.Close()
	tr.Started(cmd.Process.Pid)
	if got := TreeCPU(tr); got < cpu {
		t.Errorf("TreeCPU of the proc tree %v, its one process used %v", got, cpu)
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
