package control

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// Stop stops each of chosen (see Pick) as how says, says what it did on
// out and each failure on errOut, and returns 1 when one failed, else 0.
// A running supervisor parks its kernel (docs/operating.md#stopping-kernels):
// it kills the tree, confirms the release and keeps the kernel's place, so
// Jupyter does not restart it and the notebook's next cell starts a fresh
// kernel, told why. how.Exit ends the supervisor too.
func Stop(out, errOut io.Writer, chosen []record.State, n gpu.Session, how How) int {
	if err := n.Err(); err != nil {
		fmt.Fprintf(out, "GPU release not checked: %v\n", err)
	}
	code := 0
	for _, o := range stopEach(out, errOut, chosen, func(st record.State, w *stopOutput) {
		if _, err := stopOne(w, st, n, how); err != nil {
			w.errorf("tfgpu-kernel stop: kernel %s: %s\n", Label(st), record.Printable(err.Error()))
		}
	}) {
		if o.failed {
			code = 1
		}
	}
	return code
}

// stopParallel is how many kernels stop works on at once: a supervisor
// that ignores SIGTERM (a record planted with a user's own such process
// as its "supervisor", attack I) then costs its own --timeout, not every
// kernel's after it.
const stopParallel = 16

// stopOutput is what stopping one kernel says, kept until it is printed
// with the others, in their order, and how it went.
type stopOutput struct {
	out, err strings.Builder
	failed   bool
	finished record.Finished // stopOne's result, for the summary of --idle-for
	skipped  bool            // not stopped: busy again when it came to it
}

func (w *stopOutput) printf(format string, args ...any) { fmt.Fprintf(&w.out, format, args...) }
func (w *stopOutput) errorf(format string, args ...any) {
	fmt.Fprintf(&w.err, format, args...)
	w.failed = true
}

// stopEach runs stop for every state, stopParallel at a time, then prints
// what each said, in the states' order, and returns how each went.
func stopEach(out, errOut io.Writer, states []record.State, stop func(record.State, *stopOutput)) []stopOutput {
	outs := make([]stopOutput, len(states))
	sem := make(chan struct{}, stopParallel)
	var wg sync.WaitGroup
	for i, st := range states {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			stop(st, &outs[i])
		}()
	}
	wg.Wait()
	for i := range outs {
		fmt.Fprint(out, outs[i].out.String())
		fmt.Fprint(errOut, outs[i].err.String())
	}
	return outs
}

// stopOne asks a live, running supervisor to stop (SIGTERM: it kills the
// tree itself and Jupyter sees the kernel end); when it does not within the
// timeout, or is stopped or gone, the tree is killed through its record
// (record.FinishKernel), and the GPU release confirmed.
func stopOne(w *stopOutput, st record.State, n gpu.Session, opts How) (record.Finished, error) {
	timeout, confirm := opts.Timeout, opts.Confirm
	d, err := record.OpenDir(st.Dir, false, true)
	if err != nil {
		return record.Finished{}, err
	}
	defer d.Close()
	if !opts.Exit && st.Parks && st.SupervisorAlive() && !st.SupervisorStopped() {
		if st.Phase == record.PhaseParked && !opts.Hold {
			w.printf("kernel %s is parked already: its next request starts a fresh kernel\n", Label(st))
			return record.Finished{}, nil
		}
		if f, ok, err := parkOne(w, st, opts); ok {
			return f, err
		}
	}
	how := "supervisor gone"
	askSupervisor := func() {
		if !st.SupervisorAlive() {
			return
		}
		how = "supervisor asked to stop"
		if st.SupervisorStopped() {
			// Stopped (SIGSTOP, a debugger): continued first, so that it
			// stops its kernel itself and Jupyter sees the kernel end,
			// rather than a kernel killed under a supervisor Jupyter
			// still takes for alive.
			_ = syscall.Kill(st.SupervisorPID, syscall.SIGCONT)
			how = "supervisor was stopped (SIGSTOP): continued and asked to stop"
		}
		_ = syscall.Kill(st.SupervisorPID, syscall.SIGTERM)
		for deadline := time.Now().Add(timeout); st.SupervisorAlive() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if st.SupervisorAlive() {
			how += "; it did not stop"
		}
	}
	start := time.Now()
	f, err := d.FinishKernel(st, record.FinishOptions{GPU: n, KillTimeout: timeout, ConfirmTimeout: confirm, BeforeKill: askSupervisor, ForGood: true})
	if err != nil {
		return f, err
	}
	w.printf("stopped kernel %s: %s; %d processes killed; %v\n", Label(st), how, f.Killed, time.Since(start).Round(time.Millisecond))
	switch {
	case f.GPU == nil:
		return f, nil // not checked (said above)
	case f.GPUErr != nil:
		return f, fmt.Errorf("GPU release not confirmed: %w", f.GPUErr)
	case len(f.GPU.Held) > 0:
		return f, fmt.Errorf("GPU memory still held %v after the kill: %s", confirm, f.GPU.HeldText())
	}
	w.printf("GPU memory released: %s (NVML, by %s, %v)\n", f.GPU.ReleasedText(), f.GPU.By, f.GPU.Took.Round(time.Millisecond))
	return f, nil
}

// StopIdle stops the running kernels that have been idle (no cell
// running) at least idleFor, with holdingGPU only those whose tree holds
// GPU memory, and says what it freed. A kernel that runs a cell is never
// stopped: each is checked again just before it is (a cell may have
// started since the list was read), and one whose execution state is not
// known is left alone (docs/operating.md#idle-kernels).
func StopIdle(out, errOut io.Writer, states []record.State, idleFor time.Duration, holdingGPU bool, n gpu.Session, how How) int {
	how.Why = "idle for " + idleFor.String()
	var holders []gpu.Holder
	if holdingGPU {
		hs, err := n.Holders()
		if err == nil && gpu.Mode(hs) == gpu.ByBaseline {
			err = errors.New("NVML's pids are not this PID namespace's")
		}
		if err != nil {
			fmt.Fprintf(errOut, "tfgpu-kernel stop: --holding-gpu: cannot tell which kernels hold GPU memory: %s\n", record.Printable(err.Error()))
			return 1
		}
		holders = hs
	} else if err := n.Err(); err != nil {
		fmt.Fprintf(out, "GPU release not checked: %v\n", err)
	}
	what := "idle for " + idleFor.String()
	if holdingGPU {
		what += " and holding GPU memory"
	}
	code, stopped := 0, 0
	left := map[string]int{}
	freed := map[int]int64{}
	type candidate struct {
		idle time.Duration
		held map[int]int64
	}
	var chosen []record.State
	cands := map[string]candidate{}
	for _, st := range states {
		idle, why := idleLongEnough(st, idleFor, time.Now())
		var held map[int]int64
		if why == "" && holdingGPU {
			if held = gpu.Sum(gpu.Holding(holders, st.TreePids())); len(held) == 0 {
				why = "holding no GPU memory"
			}
		}
		if why != "" {
			left[why]++
			continue
		}
		chosen = append(chosen, st)
		cands[st.File()] = candidate{idle, held}
	}
	// Each is checked again just before it is stopped, and they are
	// stopped stopParallel at a time (stopEach).
	outs := stopEach(out, errOut, chosen, func(st record.State, w *stopOutput) {
		if a, err := record.ReadActivity(st); err != nil || a.Busy || !a.Since.Equal(st.Activity.Since) {
			w.skipped = true // a cell may have started since the list was read
			return
		}
		c := cands[st.File()]
		label := Label(st)
		holding := ""
		if len(c.held) > 0 {
			holding = ", holding " + (gpu.Result{Released: c.held}).ReleasedText()
		}
		w.printf("kernel %s: idle for %v%s: stopping\n", label, c.idle.Round(time.Second), holding)
		var err error
		if w.finished, err = stopOne(w, st, n, how); err != nil {
			w.errorf("tfgpu-kernel stop: kernel %s: %s\n", Label(st), record.Printable(err.Error()))
		}
	})
	for _, o := range outs {
		if o.failed {
			code = 1
		}
		if o.skipped {
			left["busy since the list was read"]++
			continue
		}
		if f := o.finished; f.GPU != nil && f.GPUErr == nil && len(f.GPU.Held) == 0 {
			for dev, b := range f.GPU.Released {
				freed[dev] += b
			}
		}
		stopped++
	}
	var reasons []string
	for why, k := range left {
		reasons = append(reasons, fmt.Sprintf("%d %s", k, why))
	}
	slices.Sort(reasons)
	summary := fmt.Sprintf("stopped %d kernel(s) %s", stopped, what)
	if len(freed) > 0 {
		summary += "; GPU memory released: " + (gpu.Result{Released: freed}).ReleasedText()
	}
	if len(reasons) > 0 {
		summary += "; left alone: " + strings.Join(reasons, ", ")
	}
	fmt.Fprintln(out, summary)
	return code
}

// idleLongEnough returns how long st's kernel has been idle, or why it is
// not a kernel to stop for being idle at least idleFor.
func idleLongEnough(st record.State, idleFor time.Duration, now time.Time) (time.Duration, string) {
	switch {
	case st.Phase != record.PhaseRunning:
		return 0, "not running"
	case !st.SupervisorAlive() || st.SupervisorStopped():
		return 0, "without a live supervisor (tfgpu-kernel stop ID)"
	case st.Activity == nil:
		return 0, "of unknown activity"
	case st.Activity.Busy:
		return 0, "busy"
	}
	idle := now.Sub(st.Activity.Since)
	if idle < idleFor {
		return idle, "idle less than " + idleFor.String()
	}
	return idle, ""
}

// How is how stop goes about each kernel.
type How struct {
	Timeout, Confirm time.Duration
	Exit             bool   // end the supervisor (SIGTERM), not park the kernel
	By, Why          string // for the order: who stops it, and why
	Hold             bool   // keep it down: until Until (zero: until started again)
	Until            time.Time
	Message          string // for the notebook's user
}

// order is the Order for one kernel.
func (h How) order(now time.Time) record.Order {
	return record.Order{By: h.By, Why: h.Why, At: now.UTC(), Hold: h.Hold, HoldUntil: h.Until, Message: h.Message}
}

// ParseUntil reads --until: a clock time today (tomorrow when it has
// passed), a date and time, RFC 3339, or a duration from now.
func ParseUntil(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("give a positive duration")
		}
		return now.Add(d), nil
	}
	for _, layout := range []string{"15:04", "2006-01-02 15:04", "2006-01-02T15:04", time.RFC3339} {
		t, err := time.ParseInLocation(layout, s, time.Local)
		if err != nil {
			continue
		}
		if layout == "15:04" {
			t = time.Date(now.Year(), now.Month(), now.Day(), t.Hour(), t.Minute(), 0, 0, time.Local)
			if !t.After(now) {
				t = t.AddDate(0, 0, 1)
			}
		}
		if !t.After(now) {
			return time.Time{}, fmt.Errorf("that is in the past")
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("want a time (15:00, 2026-12-24 08:00) or a duration (2h)")
}

// parkOne leaves an order for st's supervisor and signals it; the
// supervisor kills the tree, confirms the GPU release and records its
// kernel parked (wrapper/park.go). ok is false when it did not within the
// timeout (an older version, or a supervisor too busy): the order is
// taken back, and stopOne ends the supervisor instead.
func parkOne(w *stopOutput, st record.State, how How) (f record.Finished, ok bool, err error) {
	// The order goes into the directory the supervisor holds open, never
	// through a path its user may have swapped for another's directory.
	notParked := func(why error) (record.Finished, bool, error) {
		w.printf("kernel %s: its supervisor could not be asked to park it (%s); asking it to stop\n",
			Label(st), record.Printable(why.Error()))
		return f, false, nil
	}
	d, err := record.SupervisorDir(st)
	if err != nil {
		return notParked(err)
	}
	defer d.Close()
	start := time.Now()
	if err := d.WriteOrder(st.KernelID, how.order(start)); err != nil {
		return notParked(err)
	}
	if err := syscall.Kill(st.SupervisorPID, syscall.SIGUSR1); err != nil {
		_, _ = d.TakeOrder(st.KernelID)
		return notParked(err)
	}
	for deadline := start.Add(how.Timeout); time.Now().Before(deadline) && st.SupervisorAlive(); time.Sleep(20 * time.Millisecond) {
		now, err := d.StateOf(st.KernelID)
		if err != nil || now.SupervisorPID != st.SupervisorPID || now.Phase != record.PhaseParked || now.Parked == nil ||
			now.Parked.Hold != how.Hold || (now.Parked.At.Before(start.Add(-time.Second)) && st.Phase != record.PhaseParked) {
			continue
		}
		p := now.Parked
		if st.Phase == record.PhaseParked { // parked before: now held
			w.printf("kernel %s is held down %s\n", Label(st), holdText(p))
			return f, true, nil
		}
		f = record.Finished{Killed: p.Killed, Took: time.Since(start)}
		next := "the next cell starts a fresh kernel"
		if p.Hold {
			next = "held down " + holdText(p)
		}
		w.printf("stopped kernel %s: parked by its supervisor, which keeps its place (%s); %d processes killed; %v\n",
			Label(st), next, p.Killed, f.Took.Round(time.Millisecond))
		switch {
		case p.Held != "":
			return f, true, fmt.Errorf("%s", p.Held)
		case len(p.GPU) > 0:
			f.GPU = &gpu.Result{Released: p.GPU}
			w.printf("GPU memory released: %s (NVML, confirmed by the supervisor)\n", p.Released)
		}
		return f, true, nil
	}
	_, _ = d.TakeOrder(st.KernelID)
	return notParked(fmt.Errorf("it did not within %v", how.Timeout))
}

// holdText says until when a parked kernel is held down.
func holdText(p *record.Parked) string {
	if p.HoldUntil.IsZero() {
		return "until started again (tfgpu-kernel start)"
	}
	return "until " + p.HoldUntil.Local().Format("Jan 2 15:04")
}
