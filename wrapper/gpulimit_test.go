package wrapper

import (
	"testing"
	"time"
)

// A cell that starts brings the next GPU sample within gpuSampleBusy, and
// cells that start faster than that never put it off.
func TestGPUSampleIsBroughtForwardNotPutOff(t *testing.T) {
	l := &gpuLimit{limit: 1 << 30, kick: make(chan struct{}, 1)}
	l.arm(gpuSampleIdle)
	defer l.timer.Stop()
	s := &supervisor{limit: l}
	before := time.Now()
	l.noteActivity(true)
	s.cellStarted()
	after := time.Now()
	first := l.due
	// Due gpuSampleBusy after the cell started: between the clock read
	// before and after it, whatever the scheduler did meanwhile.
	if first.Before(before.Add(gpuSampleBusy)) || first.After(after.Add(gpuSampleBusy)) {
		t.Fatalf("after a cell started (%v..%v) the next sample is due at %v, want %v after it", before, after, first, gpuSampleBusy)
	}
	for range 5 {
		time.Sleep(gpuSampleBusy / 5) // paces the cells: five within gpuSampleBusy
		l.noteActivity(false)
		l.noteActivity(true)
		s.cellStarted()
	}
	if !l.due.Equal(first) {
		t.Fatalf("cells starting every %v moved the sample from %v to %v", gpuSampleBusy/5, first, l.due)
	}
	select {
	case <-l.kick:
	default:
		t.Fatal("a cell that started did not tell the loop")
	}
	var none *gpuLimit
	none.noteActivity(true) // no limit: nothing to tell
}

// The over-the-limit texts never read as if the tree held exactly its
// limit: FormatBytes's one decimal is truncated, so 1030 MiB would read
// "1 GiB, over its limit of 1 GiB".
func TestGPUUseNeverReadsAsItsLimit(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	for _, c := range []struct {
		total, limit int64
		want         string
	}{
		{1150 * mib, gib, "1.1 GiB"},
		{1030 * mib, gib, "1030 MiB"},
		{gib + 512<<10, gib, "1049088 KiB"},
		{8*gib + 100*mib, 8 * gib, "8292 MiB"},
		{950 * mib, gib, "950 MiB"}, // the 90 % warning's figure
		{300*mib + 1, 300 * mib, "314572801 B"},
	} {
		u := &gpuUse{total: c.total, limit: c.limit}
		if got := u.usedText(); got != c.want {
			t.Errorf("usedText(%d of %d) = %q, want %q", c.total, c.limit, got, c.want)
		}
	}
}
