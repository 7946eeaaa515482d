package control

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// Prometheus writes ps's rows in the Prometheus text exposition format
// (version 0.0.4), for node_exporter's textfile collector
// (docs/operating.md#metrics): one family after another, every sample of
// a kernel labelled with its id, notebook and user.
func Prometheus(out io.Writer, rows []record.KernelStatus, gpuNote string, now time.Time) error {
	w := bufio.NewWriter(out)
	family := func(name, help string, samples func(emit func(labels string, v float64))) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		samples(func(labels string, v float64) {
			fmt.Fprintf(w, "%s{%s} %s\n", name, labels, strconv.FormatFloat(v, 'f', -1, 64))
		})
	}
	each := func(f func(r record.KernelStatus, k string, emit func(string, float64))) func(func(string, float64)) {
		return func(emit func(string, float64)) {
			for _, r := range rows {
				f(r, kernelLabels(r), emit)
			}
		}
	}
	attributed := 1.0
	if gpuNote != "" {
		attributed = 0
	}
	fmt.Fprintf(w, "# HELP tfgpu_gpu_memory_attributed 1 when GPU memory could be attributed to kernels (NVML loaded, its pids this namespace's), else 0.\n"+
		"# TYPE tfgpu_gpu_memory_attributed gauge\ntfgpu_gpu_memory_attributed %s\n", strconv.FormatFloat(attributed, 'f', -1, 64))
	family("tfgpu_kernel_info", "A kernel supervised by tfgpu-kernel (always 1), with its state, execution state and containment.",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) {
			emit(k+`,state="`+labelValue(r.State)+`",execution_state="`+labelValue(r.ExecutionState)+
				`",containment="`+labelValue(r.Containment)+`"`, 1)
		}))
	family("tfgpu_kernel_gpu_memory_bytes", "GPU memory the kernel's whole process tree holds on one device (NVML).",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) {
			for _, g := range r.GPU {
				if g.UsedBytes >= 0 {
					emit(k+`,gpu="`+strconv.Itoa(g.Index)+`",uuid="`+labelValue(g.UUID)+`"`, float64(g.UsedBytes))
				}
			}
		}))
	family("tfgpu_kernel_gpu_placement", "1 per GPU or MIG instance --gpus auto chose for the kernel at its start (uuid), held or not; absent without --gpus auto, or when CUDA_VISIBLE_DEVICES was set before the start.",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) {
			if p := r.Placement; p != nil && !p.Explicit {
				for _, u := range p.GPUs {
					emit(k+`,gpu="`+strconv.Itoa(u.Device)+`",uuid="`+labelValue(u.UUID)+`"`, 1)
				}
			}
		}))
	family("tfgpu_kernel_rss_bytes", "Resident memory of the kernel's whole process tree.",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) { emit(k, float64(r.RSSBytes)) }))
	family("tfgpu_kernel_processes", "Live processes in the kernel's tree.",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) { emit(k, float64(len(r.PIDs))) }))
	family("tfgpu_kernel_role_rss_bytes", "Resident memory of the kernel's processes of one role (docs/design.md#processes): the tree's (kernel, tree) as above, the supervisor's and its helpers', the spare kept for the next restart (spare, standby, standby-watcher).",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) {
			for _, role := range roleTotals(r) {
				emit(k+`,role="`+labelValue(string(role.role))+`"`, float64(role.rss))
			}
		}))
	family("tfgpu_kernel_role_processes", "Live processes of the kernel in one role (docs/design.md#processes).",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) {
			for _, role := range roleTotals(r) {
				emit(k+`,role="`+labelValue(string(role.role))+`"`, float64(role.n))
			}
		}))
	family("tfgpu_kernel_busy", "1 while a cell runs, 0 when idle; absent when unknown.",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) {
			switch r.ExecutionState {
			case record.ExecBusy:
				emit(k, 1)
			case record.ExecIdle:
				emit(k, 0)
			}
		}))
	family("tfgpu_kernel_idle_seconds", "Seconds since the kernel's last cell ended (or it started), 0 while one runs; absent when unknown.",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) {
			if s, ok := idleFor(r, now); ok {
				emit(k, s.Round(time.Millisecond).Seconds())
			}
		}))
	family("tfgpu_kernel_start_time_seconds", "When the kernel's supervisor started, in seconds since the Unix epoch.",
		each(func(r record.KernelStatus, k string, emit func(string, float64)) {
			if !r.Started.IsZero() {
				emit(k, float64(r.Started.UnixMilli())/1000)
			}
		}))
	return w.Flush()
}

// roleTotal is what a kernel's processes of one role add up to.
type roleTotal struct {
	role record.Role
	n    int
	rss  int64
}

// roleTotals sums r's processes by role, each process once, in the order
// the roles first appear.
func roleTotals(r record.KernelStatus) []roleTotal {
	var out []roleTotal
	for _, m := range r.Processes {
		i := slices.IndexFunc(out, func(t roleTotal) bool { return t.role == m.Role })
		if i < 0 {
			out = append(out, roleTotal{role: m.Role})
			i = len(out) - 1
		}
		out[i].n++
		out[i].rss += m.RSSBytes
	}
	return out
}

// idleFor is how long r has been idle (0 while busy); false when unknown.
func idleFor(r record.KernelStatus, now time.Time) (time.Duration, bool) {
	switch {
	case r.ExecutionState == record.ExecBusy:
		return 0, true
	case r.ExecutionState != record.ExecIdle || r.LastActivity == nil:
		return 0, false
	}
	return max(now.Sub(*r.LastActivity), 0), true
}

func kernelLabels(r record.KernelStatus) string {
	return `kernel_id="` + labelValue(r.KernelID) + `",notebook="` + labelValue(r.Session) + `",user="` + labelValue(r.User) + `"`
}

// labelValue escapes a label value as the text format requires: what a
// record carries (a notebook's path) is any text.
func labelValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
