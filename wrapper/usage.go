package wrapper

import (
	"math"
	"os"
	"runtime"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// jupyter-resource-usage's "Kernel usage" panel asks the kernel with a
// usage_request on control; ipykernel answers for its own process and the
// children it can see. The supervisor adds what only it knows to the
// kernel's usage_reply (docs/operating.md#usage-in-the-notebook): the whole
// tree's CPU and memory (escaped workers included), its processes, and its
// GPU memory per device; it keeps every other field the kernel sent and
// fills the host fields a kernel without psutil leaves out.

// usageWait bounds how long the relay's control pump waits for the loop's
// figures; past it the kernel's reply goes on as the kernel sent it.
const usageWait = time.Second

// usageFigures are the supervisor's: set replaces the kernel's fields,
// fill only adds those the kernel left out.
type usageFigures struct {
	set, fill map[string]any
}

// usagePoint is the tree's CPU time when the last figures were made.
type usagePoint struct {
	at  time.Time
	cpu time.Duration
}

// usageHook is the relay's Usage hook: it runs on the control pump and
// asks the loop, which owns the tree and the NVML session, for the figures.
func (s *supervisor) usageHook(content map[string]any) {
	ask := make(chan usageFigures, 1)
	if f, ok := askLoop(s.usagec, ask, ask, usageWait); ok {
		mergeUsage(content, f)
	}
}

// askLoop hands the loop question q on c and waits for its answer, both
// within wait: past it (the loop is stopping the kernel, or busy) ok is
// false and the pump goes on without.
func askLoop[Q, A any](c chan<- Q, q Q, answer <-chan A, wait time.Duration) (a A, ok bool) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case c <- q:
	case <-t.C:
		return a, false
	}
	select {
	case a = <-answer:
		return a, true
	case <-t.C:
		return a, false
	}
}

// mergeUsage puts f into the kernel's reply content.
func mergeUsage(content map[string]any, f usageFigures) {
	for k, v := range f.set {
		content[k] = v
	}
	for k, v := range f.fill {
		if _, ok := content[k]; !ok {
			content[k] = v
		}
	}
}

// usageNow makes the figures, on the loop. kernel_cpu is the tree's CPU use
// since the previous usage_request (the first: since the kernel started),
// in percent of one CPU as psutil gives it; kernel_memory is its
// proportional set size (shared pages counted once over the tree), as
// ipykernel's own figure is its processes' PSS.
func (s *supervisor) usageNow() usageFigures {
	now := time.Now()
	pids, err := s.tree.Pids()
	if err != nil && s.kpid > 0 {
		pids = []int{s.kpid}
	}
	cpu := cgroup.TreeCPU(s.tree)
	pct := 0.0
	if dt := now.Sub(s.usageAt.at); dt > 0 && cpu >= s.usageAt.cpu {
		pct = math.Round(1000*float64(cpu-s.usageAt.cpu)/float64(dt)) / 10
	}
	s.usageAt = usagePoint{at: now, cpu: cpu}
	var mem int64
	for _, p := range pids {
		mem += proc.PSS(p)
	}
	set := map[string]any{
		"kernel_cpu":       pct,
		"kernel_memory":    mem,
		"kernel_processes": len(pids),
		"kernel_usage_of":  "the kernel's whole process tree (tfgpu-kernel)",
	}
	if s.mem != nil {
		set["kernel_memory_limit"] = s.mem.Limit()
	}
	if s.limit != nil {
		set["gpu_memory_limit"] = s.limit.limit
	}
	if hs, ok := s.gpu.holders(); ok {
		held := gpu.Sum(gpu.Watch(hs, pids, s.gpu.baseline).Held)
		var total int64
		devs := []map[string]any{}
		for _, d := range s.gpu.sess.Devices() {
			if !s.usesDevice(d) {
				continue
			}
			used := held[d.Index] // 0 when the tree holds nothing there; -1: NVML has no figure
			total += max(used, 0)
			devs = append(devs, map[string]any{"index": d.Index, "uuid": d.UUID, "name": d.Name,
				"total_bytes": d.Total, "used_bytes": used})
		}
		set["gpu_memory"], set["gpus"] = total, devs
	}
	if s.placement != nil {
		set["gpu_placement"] = s.placement
	}
	if s.gpu.last != nil {
		// The release this supervisor confirmed: after a Restart, the
		// previous tree's (release.go).
		set[releaseMsgType] = s.gpu.last
	}
	fill := map[string]any{"pid": s.kpid, "cpu_count": runtime.NumCPU()}
	if h, err := os.Hostname(); err == nil {
		fill["hostname"] = h
	}
	if m, err := proc.ReadHostMemory(); err == nil {
		// psutil.virtual_memory()'s fields, as ipykernel sends them.
		used := m.Total - m.Free - m.Buffers - m.Cached
		if used < 0 {
			used = m.Total - m.Free
		}
		fill["host_virtual_memory"] = map[string]any{"total": m.Total, "available": m.Available,
			"percent": math.Round(1000*float64(m.Total-m.Available)/float64(m.Total)) / 10,
			"used":    used, "free": m.Free, "buffers": m.Buffers, "cached": m.Cached}
	}
	return usageFigures{set: set, fill: fill}
}
