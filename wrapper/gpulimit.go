package wrapper

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
)

// The GPU memory limit (--gpu-memory-limit, docs/operating.md#gpu-memory-limit):
// the supervisor samples what the kernel's whole tree holds through NVML,
// summed over the watched devices and attributed as the release check
// attributes it (by pid, or by baseline in a PID namespace). At 90 % the
// running cell is warned once; over the limit the tree is killed, the
// release confirmed, the cell told, and the supervisor exits as a dead
// kernel's would, so Jupyter starts a fresh one.
//
// Sampling runs only with a limit, and only as often as it must: every
// gpuSampleBusy while a cell runs, every gpuSampleIdle otherwise (escaped
// workers and threads allocate outside cells too). A cell that starts
// makes the next sample come within gpuSampleBusy.
const (
	gpuSampleBusy = 500 * time.Millisecond
	gpuSampleIdle = 5 * time.Second
	gpuWarnAt     = 0.9 // of the limit: the running cell is warned once
)

// ExitGPULimit is the supervisor's exit code when it killed the kernel over
// its GPU memory limit: a SIGKILLed kernel's, as with the memory limit's
// OOM kill, so that Jupyter's restarter starts a fresh one.
const ExitGPULimit = 128 + 9

// gpuLimit is the limit's state; the loop owns it (busy is the relay's
// hook's).
type gpuLimit struct {
	limit  int64
	timer  *time.Timer
	due    time.Time     // when timer fires
	busy   atomic.Bool   // a cell runs (the relay's Activity hook)
	kick   chan struct{} // a cell started: sample soon
	warned bool          // the 90 % warning was given
}

// gpuUse is what the tree held at a sample over the limit.
type gpuUse struct {
	total  int64
	perDev map[int]int64
	limit  int64
}

func (u *gpuUse) text() string {
	return fmt.Sprintf("%s of GPU memory (%s)", u.usedText(), (gpu.Result{Released: u.perDev}).ReleasedText())
}

// usedText is the total as the texts give it: FormatBytes's one decimal,
// unless that reads as the limit itself ("used 1 GiB, over its limit of
// 1 GiB" for 1030 MiB); then in MiB, KiB or bytes, whichever tells them
// apart.
func (u *gpuUse) usedText() string {
	if s := gpu.FormatBytes(u.total); s != gpu.FormatBytes(u.limit) {
		return s
	}
	if u.total>>20 != u.limit>>20 {
		return fmt.Sprintf("%d MiB", u.total>>20)
	}
	if u.total>>10 != u.limit>>10 {
		return fmt.Sprintf("%d KiB", u.total>>10)
	}
	return fmt.Sprintf("%d B", u.total)
}

// startGPULimit arms the sampling when a limit is set and NVML can
// enforce it; it says once why not otherwise.
func (s *supervisor) startGPULimit() {
	limit := s.cfg.GPUMemoryLimit
	if limit <= 0 {
		return
	}
	if err := s.gpu.sess.Err(); err != nil {
		s.log.Warn("GPU memory limit not enforced", "limit", bytesize.Format(limit), "why", err)
		return
	}
	s.limit = &gpuLimit{limit: limit, kick: make(chan struct{}, 1)}
	s.limit.arm(gpuSampleBusy)
	s.log.Info("GPU memory limit", "limit", bytesize.Format(limit),
		"sample_every", gpuSampleBusy.String()+" busy, "+gpuSampleIdle.String()+" idle")
}

// limitTimer is the loop's channel for the next sample; nil without a
// limit (a nil channel never fires).
func (s *supervisor) limitTimer() <-chan time.Time {
	if s.limit == nil {
		return nil
	}
	return s.limit.timer.C
}

// limitKick is the loop's channel for a cell that started; nil without a
// limit.
func (s *supervisor) limitKick() <-chan struct{} {
	if s.limit == nil {
		return nil
	}
	return s.limit.kick
}

// cellStarted brings the next sample within gpuSampleBusy, never later
// than it was due: cells that start faster than that do not put it off.
func (s *supervisor) cellStarted() {
	if l := s.limit; l != nil && l.busy.Load() && time.Until(l.due) > gpuSampleBusy {
		l.arm(gpuSampleBusy)
	}
}

// arm makes the next sample come in d.
func (l *gpuLimit) arm(d time.Duration) {
	l.due = time.Now().Add(d)
	if l.timer == nil {
		l.timer = time.NewTimer(d)
		return
	}
	l.timer.Reset(d)
}

// noteActivity is the limit's part of the relay's Activity hook: it
// runs on a relay goroutine and only tells the loop.
func (l *gpuLimit) noteActivity(busy bool) {
	if l == nil {
		return
	}
	l.busy.Store(busy)
	if busy {
		select {
		case l.kick <- struct{}{}:
		default: // one is pending
		}
	}
}

// sampleGPU reads what the tree holds; over the limit it returns the use,
// at 90 % it warns the running cell (or the next) once. The next sample is
// armed before it returns.
func (s *supervisor) sampleGPU() *gpuUse {
	l := s.limit
	defer func() {
		if l.busy.Load() {
			l.arm(gpuSampleBusy)
		} else {
			l.arm(gpuSampleIdle)
		}
	}()
	hs, ok := s.gpu.holders()
	if !ok {
		return nil // said once by holders; the limit is no longer enforced
	}
	pids, _ := s.tree.Pids()
	if s.kpid > 0 && !slices.Contains(pids, s.kpid) {
		pids = append(pids, s.kpid)
	}
	held := gpu.Sum(gpu.Watch(hs, pids, s.gpu.baseline).Held)
	u := &gpuUse{perDev: held, limit: l.limit}
	for _, b := range held {
		u.total += max(b, 0) // an entry without a figure (-1) counts nothing
	}
	switch {
	case u.total > l.limit:
		return u
	case !l.warned && float64(u.total) >= gpuWarnAt*float64(l.limit):
		l.warned = true
		text := fmt.Sprintf("tfgpu-kernel: this kernel holds %s, %.0f%% of its limit of %s; over the limit it is stopped and the next cell starts a fresh kernel.\n",
			u.text(), 100*float64(u.total)/float64(l.limit), gpu.FormatBytes(l.limit))
		s.log.Warn("kernel near its GPU memory limit", "used", u.usedText(), "limit", gpu.FormatBytes(l.limit))
		if !s.relay.WarnRunningCell(s.id, text) {
			s.relay.WarnNextCell(s.id, text)
		}
	}
	return nil
}
