//go:build e2e

package main

import (
	"strings"
	"testing"
	"time"
)

// TestBenchSmoke runs the benchmark harness with tiny sizes: every workload
// runs on both kernels, every figure is printed and every process reaped.
// The figures themselves are not asserted (noise, tiny sizes).
func TestBenchSmoke(t *testing.T) {
	benchJupyterPython(t)
	if testing.Short() {
		t.Skip("starts and restarts two real kernels")
	}
	dir := t.TempDir()
	env := benchSetup(t, dir)
	out, res := benchRun(t, env, dir, true, 3*time.Minute)
	if len(res.Errors) > 0 || !res.Quick {
		t.Fatalf("bench.py reported errors %q (quick=%v)\n%s", res.Errors, res.Quick, out)
	}
	want := []string{"pass", "stream", "display", "restart", "rss_idle", "rss_after", "rss_peak",
		"cpu_idle", "cpu_stream", "cpu_display", "wakeups_idle"}
	got := map[string]benchFigure{}
	for _, f := range res.Figures {
		got[f.Key] = f
	}
	for _, k := range want {
		f, ok := got[k]
		if !ok || f.Wrapped == nil {
			t.Errorf("figure %q missing from the results\n%s", k, out)
			continue
		}
		// the table line: figure | wrapped | direct | ratio | budget | ok?
		if !benchHasLine(out, f.Figure, 6) {
			t.Errorf("no table line for %q in\n%s", f.Figure, out)
		}
		if strings.HasPrefix(k, "rss_") || strings.HasPrefix(k, "cpu_") || k == "wakeups_idle" {
			continue // supervisor-only figures have no direct value or ratio
		}
		if f.Direct == nil || f.Ratio == nil || *f.Wrapped <= 0 || *f.Direct <= 0 {
			t.Errorf("figure %q: want wrapped, direct and ratio, got %+v", k, f)
		}
	}
	if !benchHasLine(out, "figure ", 6) {
		t.Errorf("no table header in\n%s", out)
	}
	t.Logf("\n%s", out)
}

func benchHasLine(out, prefix string, cols int) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) && len(strings.Split(l, " | ")) == cols {
			return true
		}
	}
	return false
}
