//go:build linux

package main

import (
	"testing"
	"time"
)

// Issue 25, the spare kernel: testdata/e2e/spare.py on each stack. adopt:
// the spare is outside the kernel's tree and shown by ps, the restart makes
// it the kernel, the launched process is a stub (interrupt forwarded, exit
// code mirrored), the next restart uses the next spare, a shut-down dead
// kernel takes its waiting spare along. stale: a package installed in the
// notebook means a cold start that imports it. off: TFGPU_SPARE=0.
func TestE2ESpare(t *testing.T) {
	eachStack(t, func(t *testing.T, stack string) {
		s := e2eSetupStack(t, stack)
		if !s.wrapped {
			t.Skip("the spare is the supervisor's")
		}
		gs := *s
		gs.env = append(append([]string{}, s.env...), "E2E_TFGPU_BIN="+s.bin)
		for _, what := range []string{"adopt", "stale", "off"} {
			t.Run(what, func(t *testing.T) {
				res := gs.scenario(t, 180*time.Second, "spare.py", what)
				for _, k := range []string{"restart_s", "restart2_s"} {
					if v, ok := res.Facts[k]; ok {
						t.Logf("%s %s: %v s", what, k, v)
					}
				}
			})
		}
	})
}
