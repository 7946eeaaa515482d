package wrapper

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
)

// gpuCheck is the supervisor's GPU policy (docs/design.md#gpu-confirmation):
// NVML's process list before the kernel spawns (the baseline), what the
// tree holds just before it is killed, and the wait until NVML lists none
// of it. Without NVML its session is gpu.Off and every step is a no-op;
// an NVML that fails once is switched off for the supervisor's life, so a
// broken driver never makes it loop on errors.
type gpuCheck struct {
	sess     gpu.Session
	log      *slog.Logger
	timeout  time.Duration // ConfirmTimeout
	baseline []gpu.Holder  // NVML's process list before the kernel spawned

	saidNoFigures bool // NVML gives no per-process figures: said once

	// last is the outcome of the last release check of this kernel's
	// trees (confirmWithin), for the notebook's page (release.go).
	last *releaseFacts
}

// visibleDevices is the device selection the kernel will see, and the
// variable it came from.
func visibleDevices() (visible, from string) {
	if v := os.Getenv("CUDA_VISIBLE_DEVICES"); v != "" {
		return v, "CUDA_VISIBLE_DEVICES"
	}
	return os.Getenv("NVIDIA_VISIBLE_DEVICES"), "NVIDIA_VISIBLE_DEVICES"
}

// openGPUCheck starts the NVML session for the supervisor's life, and logs
// what it watches, or once why the GPU cannot be checked (no driver, no
// library, init failure): the kernel then runs as usual.
func openGPUCheck(library string, timeout time.Duration, lg *slog.Logger) *gpuCheck {
	visible, from := visibleDevices()
	start := time.Now()
	g := &gpuCheck{sess: gpu.Connect(library, visible), log: lg, timeout: timeout}
	if err := g.sess.Err(); err != nil {
		lg.Info("GPU release will not be checked", "why", err)
		return g
	}
	devs := make([]string, 0, len(g.sess.Devices()))
	for _, d := range g.sess.Devices() {
		devs = append(devs, fmt.Sprintf("GPU%d", d.Index))
	}
	driver, notes := g.sess.About()
	attrs := []any{"driver", driver, "watched", strings.Join(devs, ","), "init", time.Since(start).Round(time.Millisecond)}
	if visible != "" {
		attrs = append(attrs, from, visible)
	}
	if len(notes) > 0 {
		attrs = append(attrs, "note", strings.Join(notes, "; "))
	}
	lg.Info("NVML", attrs...)
	return g
}

func (g *gpuCheck) close() { g.sess.Close() }

// holders asks NVML once.
func (g *gpuCheck) holders() ([]gpu.Holder, bool) {
	if g.sess.Err() != nil {
		return nil, false
	}
	hs, err := g.sess.Holders()
	if err != nil {
		g.log.Warn("GPU release will not be checked any more", "why", err)
		g.sess.Close()
		g.sess = gpu.Off(err)
		return nil, false
	}
	if !g.saidNoFigures && slices.ContainsFunc(hs, func(h gpu.Holder) bool { return h.Bytes < 0 }) {
		g.saidNoFigures = true
		g.log.Info("NVML gives no per-process GPU memory figures (NVML_VALUE_NOT_AVAILABLE); release is still confirmed by process entries")
	}
	return hs, true
}

// takeBaseline records NVML's process list before the kernel spawns.
func (g *gpuCheck) takeBaseline() {
	if hs, ok := g.holders(); ok {
		g.baseline = hs
	}
}

// watch records what the tree is and holds, just before it is killed;
// nil when the GPU is not checked. kpid is the kernel, which may be dead
// already while its context is still being torn down.
func (g *gpuCheck) watch(tree cgroup.Tree, kpid int) *gpu.Old {
	hs, ok := g.holders()
	if !ok {
		return nil
	}
	pids, _ := tree.Pids()
	if kpid > 0 && !slices.Contains(pids, kpid) {
		pids = append(pids, kpid)
	}
	return gpu.Watch(hs, pids, g.baseline)
}

// confirm waits until NVML lists nothing of old, within the confirm
// timeout, and logs the outcome in one line. It returns the warning for
// the user when memory is still held, "" otherwise.
func (g *gpuCheck) confirm(event string, old *gpu.Old) string {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	w, _ := g.confirmWithin(ctx, event, old)
	return w
}

// confirmWithin is confirm until ctx ends; held says whether memory was
// still held then.
func (g *gpuCheck) confirmWithin(ctx context.Context, event string, old *gpu.Old) (warning string, held bool) {
	_, warning, held = g.check(ctx, event, old)
	return warning, held
}

// check confirms the release of old until ctx ends, keeps the outcome for
// the notebook's page (release.go) and logs it; released is what NVML
// confirmed per device (nil when nothing was checked, it failed, or memory
// is still held).
func (g *gpuCheck) check(ctx context.Context, event string, old *gpu.Old) (released map[int]int64, warning string, held bool) {
	if old == nil || g.sess.Err() != nil {
		return nil, "", false
	}
	res, err := gpu.Confirm(ctx, g.sess, *old, gpu.ConfirmPoll)
	g.last = newReleaseFacts(event, res, err, time.Now())
	g.last.old = old
	warning, held = g.report(event, res, err)
	if err == nil && !held {
		released = res.Released
	}
	return released, warning, held
}

// report logs the outcome of a release check in one line and returns the
// warning for the user when memory is still held.
func (g *gpuCheck) report(event string, res gpu.Result, err error) (warning string, held bool) {
	attrs := []any{"event", event, "released", res.ReleasedText(), "took", res.Took.Round(time.Millisecond),
		"by", res.By, "nvml_polls", res.Polls}
	switch {
	case err != nil:
		g.log.Warn("GPU release could not be confirmed", append(attrs, "err", err)...)
		return "", false
	case len(res.Held) > 0:
		waited := res.Took.Round(time.Millisecond)
		g.log.Warn("GPU memory still held after the kernel's tree was killed", append(attrs, "timeout", waited, "held", res.HeldText())...)
		return fmt.Sprintf("tfgpu-kernel: GPU memory of the previous kernel was still held %s after it was killed: %s. "+
			"It may be released later by the driver; check with 'tfgpu-kernel ps' or nvidia-smi.\n",
			waited, res.HeldText()), true
	default:
		g.log.Info("GPU memory released", attrs...)
		return "", false
	}
}

// handOff leaves old for the next supervisor of this kernel, which
// confirms the release before its kernel starts (docs/design.md#gpu-confirmation);
// when the handoff cannot be written, it confirms here.
func (s *supervisor) handOff(old *gpu.Old) {
	if old == nil {
		return
	}
	if err := s.dir.WriteHandoff(s.id, old); err != nil {
		s.log.Warn("cannot hand the GPU check to the next kernel; checking here", "err", err)
		s.gpu.confirm("restart", old)
		return
	}
	s.log.Debug("GPU check handed to the next kernel", "held", gpu.Sum(old.Held))
}

// takeHandoff confirms the release of the previous tree of this kernel,
// if its supervisor handed it over, and returns the warning for the
// user's next cell.
func (s *supervisor) takeHandoff() string {
	old, err := s.dir.TakeHandoff(s.id)
	if err != nil {
		s.log.Warn("unreadable GPU handoff", "err", err)
	}
	if old == nil {
		return ""
	}
	return s.gpu.confirm("restart", old)
}
