//go:build linux && e2e

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Containment issue, "How it is shown", item 1: a torture kernel (six
// setsid'd double-forked daemons ignoring SIGTERM, a process forking a child
// every 10 ms while it is killed, a SIGSTOPped process, two children ignoring
// SIGTERM, a process with 16 threads) through the real jupyter_client and
// the installed kernelspec, in every containment mode (TFGPU_CGROUP), on
// restart and on shutdown: jupyter_client never escalates past
// shutdown_request, nothing of the old tree is left alive (waited for, the
// time logged), the new kernel answers, no tfgpu-<kernel id> cgroup is left
// (testdata/e2e/torture.py).
func TestE2ETorture(t *testing.T) {
	s := e2eSetup(t)
	if !s.wrapped {
		t.Skip("containment modes are the supervisor's")
	}
	var summary []string
	for _, mode := range []string{"auto", "v2", "v1", "proc"} {
		for _, how := range []string{"restart", "shutdown"} {
			t.Run(mode+"/"+how, func(t *testing.T) {
				start := time.Now()
				res := s.scenario(t, 90*time.Second, "torture.py", how, mode)
				line := fmt.Sprintf("%-5s %-8s scenario %4.1fs, logged modes %v", mode, how, time.Since(start).Seconds(), res.Facts["logged_modes"])
				for _, step := range []string{"restart", "shutdown"} {
					if took, ok := res.Facts[step+"_s"]; ok {
						line += fmt.Sprintf("; %s of a %v-process tree %vs, all gone %vs after return",
							step, res.Facts[step+"_tree_size"], took, res.Facts[step+"_all_gone_after_return_s"])
					}
				}
				summary = append(summary, line)
			})
		}
	}
	t.Logf("torture per mode:\n  %s", strings.Join(summary, "\n  "))
}
