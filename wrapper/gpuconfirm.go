package wrapper

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
)

// DefaultConfirmTimeout bounds the wait for NVML to stop listing a dead
// tree's contexts: driver teardown of a large context takes a second or
// two; a restart still finishes well inside jupyter_client's 60 s
// kernel_info timeout when it runs out.
const DefaultConfirmTimeout = 10 * time.Second

// confirmPoll is how often NVML is asked while waiting for a release.
const confirmPoll = 25 * time.Millisecond

// openGPU starts the NVML session for the supervisor's life, or logs once
// why the GPU cannot be checked (no driver, no library, init failure): the
// kernel then runs as usual.
func (s *supervisor) openGPU() {
	visible, from := os.Getenv("CUDA_VISIBLE_DEVICES"), "CUDA_VISIBLE_DEVICES"
	if visible == "" {
		visible, from = os.Getenv("NVIDIA_VISIBLE_DEVICES"), "NVIDIA_VISIBLE_DEVICES"
	}
	start := time.Now()
	n, err := gpu.Open(s.cfg.NVMLLibrary, visible)
	if err != nil {
		s.log.Info("GPU release will not be checked", "why", err)
		return
	}
	s.gpu = n
	devs := make([]string, 0, len(n.Devices()))
	for _, d := range n.Devices() {
		devs = append(devs, fmt.Sprintf("GPU%d", d.Index))
	}
	attrs := []any{"driver", n.Driver, "watched", strings.Join(devs, ","), "init", time.Since(start).Round(time.Millisecond)}
	if visible != "" {
		attrs = append(attrs, from, visible)
	}
	if len(n.Notes) > 0 {
		attrs = append(attrs, "note", strings.Join(n.Notes, "; "))
	}
	s.log.Info("NVML", attrs...)
}

func (s *supervisor) closeGPU() {
	if s.gpu != nil {
		s.gpu.Close()
	}
}

// holders asks NVML once; an error is logged once and turns checking off,
// so a broken driver never makes the supervisor loop on errors.
func (s *supervisor) holders() ([]gpu.Holder, bool) {
	if s.gpu == nil {
		return nil, false
	}
	hs, err := s.gpu.Holders()
	if err != nil {
		s.log.Warn("GPU release will not be checked any more", "why", err)
		s.gpu.Close()
		s.gpu = nil
		return nil, false
	}
	if !s.noFigures && slices.ContainsFunc(hs, func(h gpu.Holder) bool { return h.Bytes < 0 }) {
		s.noFigures = true
		s.log.Info("NVML gives no per-process GPU memory figures (NVML_VALUE_NOT_AVAILABLE); release is still confirmed by process entries")
	}
	return hs, true
}

// takeBaseline records NVML's process list before the kernel spawns.
func (s *supervisor) takeBaseline() {
	if hs, ok := s.holders(); ok {
		s.baseline = hs
	}
}

// beforeKill records what the tree is and holds, just before it is killed.
func (s *supervisor) beforeKill() *gpu.Old {
	if s.gpu == nil {
		return nil
	}
	pids, _ := s.tree.Pids()
	if s.kpid > 0 && !slices.Contains(pids, s.kpid) {
		pids = append(pids, s.kpid) // dead already; its context may still be torn down
	}
	hs, ok := s.holders()
	if !ok {
		return nil
	}
	return gpu.Watch(hs, pids, s.baseline)
}

// confirm waits until NVML lists nothing of the old tree, within the
// confirm timeout, and logs the outcome in one line. It returns the warning
// for the user when memory is still held, "" otherwise.
func (s *supervisor) confirm(event string, old *gpu.Old) string {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ConfirmTimeout)
	defer cancel()
	w, _ := s.confirmWithin(ctx, event, old)
	return w
}

// confirmWithin is confirm until ctx ends; held says whether memory was
// still held then.
func (s *supervisor) confirmWithin(ctx context.Context, event string, old *gpu.Old) (warning string, held bool) {
	if old == nil || s.gpu == nil {
		return "", false
	}
	start := time.Now()
	res, err := gpu.Confirm(ctx, s.gpu, *old, confirmPoll)
	timeout := time.Since(start).Round(time.Millisecond)
	attrs := []any{"event", event, "released", res.ReleasedText(), "took", res.Took.Round(time.Millisecond),
		"by", res.By, "nvml_polls", res.Polls}
	switch {
	case err != nil:
		s.log.Warn("GPU release could not be confirmed", append(attrs, "err", err)...)
		return "", false
	case len(res.Held) > 0:
		s.log.Warn("GPU memory still held after the kernel's tree was killed",
			append(attrs, "timeout", timeout, "held", res.HeldText())...)
		return fmt.Sprintf("tfgpu-kernel: GPU memory of the previous kernel was still held %s after it was killed: %s. "+
			"It may be released later by the driver; check with 'tfgpu-kernel ps' or nvidia-smi.\n",
			timeout, res.HeldText()), true
	default:
		s.log.Info("GPU memory released", attrs...)
		return "", false
	}
}

// The restart handoff: the supervisor of a restarted kernel kills its tree
// and exits at once (jupyter_client is waiting for it), leaving what it
// knew of the tree in <state dir>/<kernel id>.gpu; the next supervisor of
// that kernel confirms the release before it spawns the new kernel.
func handoffName(id string) string { return id + ".gpu" }

func (s *supervisor) handOff(old *gpu.Old) {
	if old == nil {
		return
	}
	b, err := json.Marshal(old)
	if err == nil {
		err = s.dir.write(handoffName(s.id), b)
	}
	if err != nil {
		s.log.Warn("cannot hand the GPU check to the next kernel; checking here", "err", err)
		s.confirm("restart", old)
		return
	}
	s.log.Debug("GPU check handed to the next kernel", "held", gpu.Sum(old.Held))
}

// takeHandoff confirms the release of the previous tree of this kernel,
// if its supervisor handed it over, and returns the warning for the
// user's next cell.
func (s *supervisor) takeHandoff() string {
	b, err := s.dir.read(handoffName(s.id))
	if err != nil {
		return ""
	}
	_ = s.dir.remove(handoffName(s.id))
	var old gpu.Old
	if err := json.Unmarshal(b, &old); err != nil {
		s.log.Warn("unreadable GPU handoff", "file", filepath.Join(s.dir.path, handoffName(s.id)), "err", err)
		return ""
	}
	return s.confirm("restart", &old)
}
