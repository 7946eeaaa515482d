//go:build linux && e2e

// The containment timing figures: the full suite only (go test -tags e2e),
// since they are figures, not checks (docs/testing.md#running).

package cgroup

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestKillTiming logs kill + wait-until-empty, median of 20, per mode, of
// a 30-process binary tree and of the 30-process torture tree, the runs of
// the modes interleaved so that load on the machine hits them alike. The
// figures are in the README.
func TestKillTiming(t *testing.T) {
	if testing.Short() {
		t.Skip("timing: not in -short")
	}
	parent := requireCgroupV2(t)
	freezer, pidsParent := requireFreezer(t)
	runs := 20
	if raceEnabled {
		runs = 3 // still kills each shape in each mode; the figures are the non-race run's
	}
	modes := []struct {
		name  string
		start func(t *testing.T, mode string, extra ...string) *tree
	}{
		{"proc", startTree},
		{"v1", func(t *testing.T, mode string, extra ...string) *tree {
			tr, _ := startV1Tree(t, freezer, pidsParent, false, mode, extra...)
			return tr
		}},
		{"v2", func(t *testing.T, mode string, extra ...string) *tree {
			tr, _, _ := startV2Tree(t, parent, v2Spawn{cloneInto: true}, mode, extra...)
			return tr
		}},
	}
	shapes := []struct {
		name, mode string
		extra      []string
		reports    int // lines in the pidfile when the tree is complete
	}{
		{"binary tree", "tree", []string{envNode + "=0", envNodes + "=30"}, 30},
		{"torture tree", "torture", nil, tortureProcs + 6},
	}
	for _, sh := range shapes {
		d := make([][]time.Duration, len(modes))
		for range runs {
			for i, m := range modes {
				t.Run(m.name+"/"+sh.name, func(t *testing.T) {
					tr := m.start(t, sh.mode, sh.extra...)
					waitReported(t, tr.pidfile, sh.reports)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					begin := time.Now()
					n, err := tr.Kill(ctx)
					d[i] = append(d[i], time.Since(begin))
					if err != nil || n < 30 {
						t.Fatalf("Kill = %d, %v; want ≥ 30 killed", n, err)
					}
					tr.exitStatus(t)
				})
			}
		}
		for i, m := range modes {
			slices.Sort(d[i])
			t.Logf("kill + wait until empty, 30-process %s, median of %d: %s %.1f ms (min %.1f, max %.1f)", sh.name, runs,
				m.name, ms(d[i][len(d[i])/2]), ms(d[i][0]), ms(d[i][len(d[i])-1]))
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
