package cgroup

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
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
		if cpu = proc.CPU(cmd.Process.Pid); cpu >= 150*time.Millisecond {
			break
		}
	}
	if cpu < 150*time.Millisecond || cpu > 10*time.Second {
		t.Errorf("proc.CPU of a child that burnt ~200 ms: %v", cpu)
	}
	self := os.Getpid()
	if pss, rss := proc.PSS(self), proc.RSS(self); pss <= 0 || pss > rss+(1<<20) {
		t.Errorf("proc.PSS %d, proc.RSS %d: want 0 < PSS <= RSS", pss, rss)
	}
	if proc.CPU(1<<30) != 0 || proc.PSS(1<<30) != 0 {
		t.Error("figures for a pid that does not exist")
	}
	m, err := proc.ReadHostMemory()
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
