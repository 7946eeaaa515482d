package main

import (
	"os"
	"strings"
	"testing"
)

// stop's selections are one of an id, --all, or --idle-for; anything else
// is a usage error (exit 2) that stops nothing.
func TestStopUsage(t *testing.T) {
	bin := buildInstallTestBinary(t)
	for _, args := range [][]string{
		{"stop"}, {"stop", "--holding-gpu"}, {"stop", "--idle-for", "1h", "abc"}, {"stop", "--idle-for", "1h", "--all"},
		{"stop", "--idle-for", "-5m"}, {"stop", "--idle-for", "soon"}, {"stop", "--all", "abc"},
	} {
		env := append(os.Environ(), "TFGPU_STATE_DIR="+t.TempDir())
		if r := runInstallBin(t, env, bin, args...); r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") > 2 {
			t.Errorf("%v: exit %d, want 2 with a short error:\n%s", args, r.code, r.stderr)
		}
	}
}
