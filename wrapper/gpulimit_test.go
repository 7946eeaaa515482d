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
	l.noteActivity(true)
	s.cellStarted()
	first := l.due
	if d := time.Until(first); d > gpuSampleBusy || d < gpuSampleBusy-100*time.Millisecond {
		t.Fatalf("after a cell started the next sample is due in %v, want %v", d, gpuSampleBusy)
	}
	for range 5 {
		time.Sleep(gpuSampleBusy / 5)
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
