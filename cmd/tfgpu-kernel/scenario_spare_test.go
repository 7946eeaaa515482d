//go:build linux

package main

import (
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
)

// Issue 25, the spare kernel: testdata/e2e/spare.py on each stack. adopt:
// the spare is outside the kernel's tree and shown by ps, the restart makes
// it the kernel, the launched process is a stub (interrupt forwarded, exit
// code mirrored), the next restart uses the next spare, a shut-down dead
// kernel takes its waiting spare along. stale: a package installed in the
// notebook means a cold start that imports it. off: TFGPU_SPARE=0.
// preload: the preloaded modules were imported before the restart. age:
// a spare past --spare-max-age is replaced. kept: a client kept across
// four restarts gets each cell's output and idle at once. gpu
// (the fake NVML): a spare that holds a GPU context is discarded, once.
func TestE2ESpare(t *testing.T) {
	eachStack(t, func(t *testing.T, stack string) {
		s := e2eSetupStack(t, stack)
		if !s.wrapped {
			t.Skip("the spare is the supervisor's")
		}
		gs := *s
		gs.env = append(append([]string{}, s.env...), "E2E_TFGPU_BIN="+s.bin)
		f := gputest.New(t, 2, gputest.Full)
		for _, what := range []string{"adopt", "stale", "off", "preload", "age", "kept", "gpu"} {
			t.Run(what, func(t *testing.T) {
				ws := gs
				if what == "gpu" {
					ws.env = append(append([]string{}, gs.env...), f.Env()...)
				}
				res := ws.scenario(t, 180*time.Second, "spare.py", what)
				for _, k := range []string{"restart_s", "restart2_s"} {
					if v, ok := res.Facts[k]; ok {
						t.Logf("%s %s: %v s", what, k, v)
					}
				}
			})
		}
	})
}
