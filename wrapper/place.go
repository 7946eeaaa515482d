package wrapper

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/oom"
	"github.com/tfgpu/tfgpu-kernel/internal/place"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// --gpus auto (docs/design.md#placement): before every kernel this
// supervisor starts (the first, a spare's adoption, a fresh one after a
// park), the GPUs with the most free memory by NVML, less what the user's
// kernels that started within record.ClaimWindow claimed, become the
// kernel's CUDA_VISIBLE_DEVICES, by UUID; the first cell is told which and
// why. A CUDA_VISIBLE_DEVICES set before the start (by the user, the
// kernelspec, Slurm) wins, and nothing is chosen.

// placeLockWait bounds the wait for the user's placement lock; past it the
// kernel is placed by NVML's figures alone.
const placeLockWait = 2 * time.Second

// place chooses the kernel's GPUs, sets s.placement (which kernelEnv and
// every view read) and returns what the first cell is told.
func (s *supervisor) place() string {
	spec := s.cfg.GPUs
	s.placement = nil
	if spec == nil {
		return ""
	}
	now := time.Now()
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		s.placement = &record.Placement{Asked: spec.String(), Visible: v, Explicit: true, Enough: true, At: now,
			Why: "CUDA_VISIBLE_DEVICES was set before the start"}
		s.log.Info("--gpus "+spec.String()+": not choosing, CUDA_VISIBLE_DEVICES is set", "CUDA_VISIBLE_DEVICES", v)
		return ""
	}
	none := func(why error) string {
		s.placement = &record.Placement{Asked: spec.String(), At: now, Why: why.Error()}
		s.log.Warn("--gpus "+spec.String()+": no GPU chosen; the kernel sees every GPU", "why", why)
		return fmt.Sprintf("tfgpu-kernel: --gpus %s chose no GPU (%v); this kernel sees every GPU.\n", spec, why)
	}
	if err := s.gpu.sess.Err(); err != nil {
		return none(err)
	}
	unlock, err := s.dir.LockPlacements(placeLockWait)
	if err != nil {
		s.log.Warn("placing the kernel by NVML's figures alone", "why", err)
		unlock = func() {}
	}
	defer unlock()
	now = time.Now() // after the wait: a claim made meanwhile is not from the future
	claims, err := s.dir.Claims(now)
	if err != nil {
		s.log.Warn("placement ledger not read; starting it again", "err", err)
	}
	// This kernel's earlier claim (before a restart) is its own memory:
	// NVML shows what it still holds, if anything.
	claims = slices.DeleteFunc(claims, func(c record.Claim) bool { return c.Kernel == s.id })
	pending := map[string]uint64{}
	for _, c := range claims {
		pending[c.UUID] += c.Bytes
	}
	units, err := s.gpu.sess.Units()
	if err != nil {
		return none(err)
	}
	ch := place.Choose(units, *spec, pending)
	if len(ch.Chosen) == 0 {
		return none(fmt.Errorf("NVML lists no GPU to choose from"))
	}
	for _, c := range ch.Chosen {
		claims = append(claims, record.Claim{Kernel: s.id, UUID: c.UUID, Bytes: place.Claim(c, *spec), At: now,
			By: proc.Ref{PID: os.Getpid(), Start: s.selfStart}})
	}
	if err := s.dir.WriteClaims(claims); err != nil {
		s.log.Warn("placement ledger not written: kernels starting now may choose the same GPU", "err", err)
	}
	p := &record.Placement{Asked: spec.String(), Visible: ch.Visible(), Enough: ch.Enough, At: now}
	for _, c := range ch.Chosen {
		p.GPUs = append(p.GPUs, c.Unit)
	}
	text := ch.Text()
	p.Why, _, _ = strings.Cut(text, "\n")
	s.placement = p
	s.log.Info("GPUs chosen", "gpus", p.Visible, "asked", p.Asked, "enough", p.Enough)
	if !ch.Enough {
		devs := map[int]bool{}
		for _, c := range ch.Chosen {
			devs[c.Device] = true
		}
		if v, ok := s.gpuView(func(d gpu.Device) bool { return devs[d.Index] }); ok {
			text += oom.Held("Who holds them now, largest first:\n", v)
		}
	}
	return text
}

// placedEnv is the kernel's CUDA_VISIBLE_DEVICES entry when --gpus auto
// chose its GPUs; nil otherwise.
func (s *supervisor) placedEnv() []string {
	if p := s.placement; p != nil && !p.Explicit && p.Visible != "" {
		return []string{"CUDA_VISIBLE_DEVICES=" + p.Visible}
	}
	return nil
}

// usesDevice reports whether the kernel that runs now uses device d: every
// watched device, unless --gpus auto chose some.
func (s *supervisor) usesDevice(d gpu.Device) bool {
	p := s.placement
	if p == nil || p.Explicit || len(p.GPUs) == 0 {
		return true
	}
	return slices.ContainsFunc(p.GPUs, func(u gpu.Unit) bool { return u.Device == d.Index })
}
