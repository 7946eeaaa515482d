package control

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/place"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// Table writes ps's rows as its table, and note, why GPU memory is not
// shown, if it is not.
func Table(out io.Writer, rows []record.KernelStatus, note string, now time.Time) {
	if len(rows) == 0 {
		fmt.Fprintln(out, "no supervised kernels")
	} else {
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "KERNEL\tNOTEBOOK\tUSER\tSUPERVISOR\tKERNEL PID\tPROCS\tRSS\tSTATE\tACTIVITY\tUPTIME\tGPU MEMORY")
		for _, r := range rows {
			session := r.Session
			if session == "" {
				session = "-"
			}
			var mem []string
			for _, g := range r.GPU {
				mem = append(mem, fmt.Sprintf("GPU%d %s", g.Index, gpu.FormatBytes(g.UsedBytes)))
			}
			if len(mem) == 0 {
				mem = []string{"-"}
			}
			uptime := "-" // a record without a start (planted, or of an old version)
			if !r.Started.IsZero() && !r.Started.After(now) {
				uptime = now.Sub(r.Started).Round(time.Second).String()
			}
			state := r.State
			if p := r.Parked; p != nil && p.Hold { // down until a time, or until `start`
				state = "held"
				if !p.HoldUntil.IsZero() {
					state += " until " + p.HoldUntil.Local().Format("15:04")
				}
			}
			if len(r.Escaped) > 0 { // a process left the kernel's cgroup: its limits no longer hold it
				state += fmt.Sprintf(" (%d left its cgroup)", len(r.Escaped))
			}
			user := r.User
			if user == "" {
				user = "-"
			}
			rss := gpu.FormatBytes(r.RSSBytes)
			if r.Spare != nil && r.Spare.Off == "" { // kept for the next restart, outside the kernel's tree
				rss += " +" + gpu.FormatBytes(r.Spare.RSSBytes) + " spare"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", record.ShortID(r.KernelID), session, user, r.SupervisorPID,
				r.KernelPID, len(r.PIDs), rss, state, activity(r, now), uptime, strings.Join(mem, ", "))
		}
		w.Flush()
		for _, r := range rows { // what happened to a dirty or frozen kernel, where known
			if r.Why != "" {
				fmt.Fprintf(out, "%s %s: %s\n", record.ShortID(r.KernelID), r.State, r.Why)
			}
		}
		for _, r := range rows {
			if line := placementLine(r.Placement); line != "" {
				fmt.Fprintf(out, "%s %s\n", record.ShortID(r.KernelID), line)
			}
		}
	}
	if note != "" {
		fmt.Fprintf(out, "GPU memory not shown: %s\n", note)
	}
}

// activity is ps's ACTIVITY column: "busy 12s", "idle 2h5m", or the
// execution state when it is not known.
func activity(r record.KernelStatus, now time.Time) string {
	if r.LastActivity == nil || (r.ExecutionState != record.ExecBusy && r.ExecutionState != record.ExecIdle) {
		if r.ExecutionState == record.ExecUnknown {
			return "-"
		}
		return r.ExecutionState
	}
	return r.ExecutionState + " " + max(now.Sub(*r.LastActivity), 0).Round(time.Second).String()
}

// placementLine is what ps says of the GPUs --gpus auto gave a kernel:
// "on GPU1 (--gpus auto at 14:03: 140.0 GiB free of 141.0 GiB)".
func placementLine(p *record.Placement) string {
	switch {
	case p == nil:
		return ""
	case p.Explicit:
		return fmt.Sprintf("on CUDA_VISIBLE_DEVICES=%s, set before it started (--gpus %s chose nothing)", p.Visible, p.Asked)
	case len(p.GPUs) == 0:
		return fmt.Sprintf("on every GPU: --gpus %s chose none (%s)", p.Asked, p.Why)
	}
	var on, free []string
	for _, u := range p.GPUs {
		on = append(on, place.Label(u))
		free = append(free, gpu.FormatBytes(int64(u.Free))+" free of "+gpu.FormatBytes(int64(u.Total)))
	}
	when := "" // a record without the time (planted, or of an old version)
	if !p.At.IsZero() {
		when = " at " + p.At.Local().Format("15:04")
	}
	line := fmt.Sprintf("on %s (--gpus %s%s: %s)", strings.Join(on, ", "), p.Asked, when, strings.Join(free, ", "))
	if !p.Enough {
		line += ": not as much free as asked"
	}
	return line
}
