//go:build linux && e2e

package main

import (
	"testing"
	"time"
)

// Issue 34: run's settings are bad in the Jupyter server's environment (a
// value run cannot take, a TFGPU_ variable it does not know). Through the
// real jupyter_client and the installed kernelspec: the kernel becomes
// ready, every cell gets an error reply naming the variable as it was set,
// an interrupt and a restart do not loop, shutdown leaves no process, and
// the server log has the line once per run (testdata/e2e/badsettings.py).
func TestE2EBadSettings(t *testing.T) {
	eachStack(t, func(t *testing.T, stack string) {
		s := e2eSetupStack(t, stack)
		if !s.wrapped {
			t.Skip("the settings are the supervisor's")
		}
		for _, c := range []string{"value", "unknown"} {
			t.Run(c, func(t *testing.T) { s.scenario(t, 90*time.Second, "badsettings.py", c) })
		}
	})
}
