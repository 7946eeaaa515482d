package wrapper

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/oom"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// A cell that ends with a GPU out-of-memory error is told, on its stderr
// right after the error, who holds the memory of the GPUs this kernel uses
// (docs/design.md#a-gpu-out-of-memory-error-explained): the relay's
// CellError hook sees each verified error message on iopub, oom.Match
// decides, and the loop, which owns the tree and the NVML session, makes
// the view.

// oomWait bounds how long the iopub pump waits for the loop's view; past
// it the cell gets no explanation.
const oomWait = time.Second

// maxErrorContent bounds the error content decoded to look for an
// out-of-memory error: a real one is a few KiB, and past this the kernel's
// own message goes on without a look (oom.Match reads 64 KiB of it).
const maxErrorContent = 4 << 20

// oomAsk is the iopub pump's question to the loop.
type oomAsk struct {
	fw     oom.Framework
	answer chan string
}

// cellErrorHook is the relay's CellError hook.
func (s *supervisor) cellErrorHook(content []byte) string {
	fw, ok := matchOOM(content)
	if !ok {
		return ""
	}
	ask := oomAsk{fw: fw, answer: make(chan string, 1)}
	text, _ := askLoop(s.oomc, ask, ask.answer, oomWait)
	return text
}

// matchOOM decodes an error message's content and asks oom.Match.
func matchOOM(content []byte) (oom.Framework, bool) {
	if len(content) > maxErrorContent {
		return "", false
	}
	var c struct {
		Ename     string   `json:"ename"`
		Evalue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	}
	if json.Unmarshal(content, &c) != nil {
		return "", false
	}
	return oom.Match(c.Ename, c.Evalue, c.Traceback)
}

// oomText makes the explanation, on the loop, of the GPUs the kernel
// uses (gpuView).
func (s *supervisor) oomText(fw oom.Framework) string {
	v, ok := s.gpuView(s.usesDevice)
	if !ok {
		return oom.Unavailable(s.gpu.sess.Err().Error())
	}
	v.Framework = fw
	return oom.Explain(v)
}

// gpuView is who holds the memory of the watched devices only chooses,
// on the loop: per device, what the kernel's tree holds (as usage.go
// counts it, by pid or by baseline), the user's other kernels by notebook
// (record.Census: the one place that says which processes are a kernel),
// other processes by user, and what no process here can be found for.
// ok is false without NVML.
func (s *supervisor) gpuView(only func(gpu.Device) bool) (v oom.View, ok bool) {
	hs, ok := s.gpu.holders()
	if !ok {
		return v, false
	}
	pids, err := s.tree.Pids()
	if err != nil && s.kpid > 0 {
		pids = []int{s.kpid}
	}
	own := gpu.Watch(hs, pids, s.gpu.baseline)
	byPID := own.By == gpu.ByPID
	kernelOf := map[int]int{} // pid -> 1 + its index in kernels
	var kernels []oom.Kernel
	if byPID {
		if states, _, err := record.Collect(s.dir.Path(), false); err == nil {
			for _, k := range record.Census(states, nil) {
				if k.State.KernelID == s.id {
					continue
				}
				kernels = append(kernels, oom.Kernel{Notebook: record.Printable(k.State.Session), ID: k.State.KernelID,
					Idle: idleFor(k.State)})
				for _, p := range k.Pids(record.TreeRoles...) {
					kernelOf[p] = len(kernels)
				}
			}
		} else {
			s.log.Debug("the user's other kernels are not known", "err", err)
		}
	}
	v = oom.View{Details: s.cfg.OOMDetails}
	for _, d := range s.gpu.sess.Devices() {
		if !only(d) {
			continue
		}
		g := oom.GPU{Index: d.Index, Name: d.Name, UUID: d.UUID, Total: int64(d.Total), Free: -1,
			Own: gpu.Sum(own.Held)[d.Index]}
		if free, err := s.gpu.sess.Free(d); err == nil {
			g.Free = int64(free)
		}
		ks := make([]oom.Kernel, len(kernels))
		copy(ks, kernels)
		procs := map[int]*oom.Process{}
		for _, h := range hs {
			switch {
			case h.Device != d.Index || slices.ContainsFunc(own.Held, func(o gpu.Holder) bool { return o == h }):
			case !byPID:
				g.Unseen = addBytes(g.Unseen, h.Bytes)
			case kernelOf[h.PID] > 0:
				k := &ks[kernelOf[h.PID]-1]
				k.Bytes = addBytes(k.Bytes, h.Bytes)
			case gpu.Alive(h.PID):
				p := procs[h.PID]
				if p == nil {
					p = &oom.Process{User: gpu.Owner(h.PID), PID: h.PID, Command: gpu.Command(h.PID)}
					procs[h.PID] = p
				}
				p.Bytes = addBytes(p.Bytes, h.Bytes)
			default: // listed, but no process here: another PID namespace
				g.Unseen = addBytes(g.Unseen, h.Bytes)
			}
		}
		for _, k := range ks {
			if k.Bytes != 0 {
				g.Kernels = append(g.Kernels, k)
			}
		}
		for _, p := range procs {
			g.Processes = append(g.Processes, *p)
		}
		slices.SortFunc(g.Processes, func(a, b oom.Process) int { return a.PID - b.PID })
		v.GPUs = append(v.GPUs, g)
	}
	return v, true
}

// addBytes adds an NVML figure to a sum; -1 (no figure) makes the sum -1.
func addBytes(sum, b int64) int64 {
	if sum < 0 || b < 0 {
		return -1
	}
	return sum + b
}

// idleFor is how long a kernel has been idle by its activity record
// (at least 1ns: oom.Kernel's 0 means busy or unknown); 0 when busy or
// unknown.
func idleFor(st record.State) time.Duration {
	if st.Activity == nil || st.Activity.State() != record.ExecIdle {
		return 0
	}
	return max(time.Since(st.Activity.Since), 1)
}
