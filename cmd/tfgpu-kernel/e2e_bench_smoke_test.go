//go:build e2e

package main

import (
	"strings"
	"testing"
	"time"
)

// TestBenchSmoke runs the benchmark harness with tiny sizes: every workload
// runs on the three kernels (wrapped, direct, the byte proxy's floor),
// every figure is printed with both ratios and every process reaped.
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
		// the table line: figure | wrapped | direct | floor | ÷direct | ÷floor | budget | ok?
		if !benchHasLine(out, f.Figure, 8) {
			t.Errorf("no table line for %q in\n%s", f.Figure, out)
		}
		if strings.HasPrefix(k, "rss_") || strings.HasPrefix(k, "cpu_") || k == "wakeups_idle" {
			continue // supervisor-only figures have no direct value or ratio
		}
		if f.Direct == nil || f.Ratio == nil || *f.Wrapped <= 0 || *f.Direct <= 0 {
			t.Errorf("figure %q: want wrapped, direct and ratio, got %+v", k, f)
		}
		if f.Floor == nil || f.FloorRatio == nil || *f.Floor <= 0 {
			t.Errorf("figure %q: want the floor and the ratio to it, side by side, got %+v", k, f)
		}
		if want := map[bool]string{true: "÷floor", false: "÷direct"}[k != "restart"]; !strings.HasSuffix(f.Budget, want) {
			t.Errorf("figure %q: budget %q; want it read against %s", k, f.Budget, want)
		}
	}
	if !benchHasLine(out, "figure ", 8) {
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
