package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// cmdStop kills a supervised kernel's whole tree and waits until it is gone,
// whether its supervisor is running, hung or dead:
//
//	tfgpu-kernel stop ID|--all|--idle-for DURATION [--holding-gpu] [--exit | --hold [--until TIME] [--message TEXT]]
//
// A running supervisor parks its kernel (docs/operating.md#stopping-kernels):
// it kills the tree, confirms the release and keeps the kernel's place, so
// Jupyter does not restart it and the notebook's next cell starts a fresh
// kernel, told why. --exit ends the supervisor too, as before.
func cmdStop(args []string) int {
	fs := flag.NewFlagSet("stop", flag.ContinueOnError)
	every := fs.Bool("all", false, "stop every supervised kernel")
	userName := fs.String("user", "", "only the kernels of `USER` (a login name or uid), with an ID, --all or --idle-for; USER:ID says the same for one kernel")
	exit := fs.Bool("exit", false, "end the supervisors too: Jupyter then sees the kernels die (and may restart them)")
	holdDown := fs.Bool("hold", false, "keep the kernels down: cells are refused, saying so, until --until or 'tfgpu-kernel start'")
	until := fs.String("until", "", "with --hold: until `TIME` (15:00, 2026-12-24 08:00, or a duration such as 2h)")
	message := fs.String("message", "", "`TEXT` the notebook's user is told, e.g. \"GPU maintenance until 15:00\"")
	var idleFor, timeout, confirm time.Duration
	durationVar(fs, &idleFor, "idle-for", 0, "stop the running kernels idle (no cell running) at least this long, e.g. 2h")
	holdingGPU := fs.Bool("holding-gpu", false, "with --idle-for: only those whose tree holds GPU memory")
	durationVar(fs, &timeout, "timeout", 15*time.Second, "how long a kernel's supervisor may take to stop it (it also confirms the GPU release)")
	stateDir := fs.String("state-dir", record.DefaultDir(), "`DIR` where supervisors record their kernels")
	durationVar(fs, &confirm, "confirm-timeout", wrapper.DefaultConfirmTimeout, "how long to wait for NVML to list none of the tree's GPU contexts")
	nvmlLib := fs.String("nvml-library", "", "NVML library `FILE` to load; empty: "+gpuSoname+" through the dynamic loader")
	if _, code, done := parseFlags(fs, args, "tfgpu-kernel stop 5b2c1e7a   # a kernel id, or a unique prefix of one; alice:5b2c1e7a for alice's"); done {
		return code
	}
	uid, id, err := kernelNamed(fs.Arg(0), *userName)
	if err != nil {
		return usageError("stop", err.Error())
	}
	idle := idleFor > 0
	switch {
	case idleFor < 0:
		return usageError("stop", fmt.Sprintf("--idle-for %v: give a positive duration, e.g. 2h", idleFor))
	case timeout <= 0:
		return usageError("stop", fmt.Sprintf("--timeout %v: give a positive duration, e.g. 15s", timeout))
	case confirm <= 0:
		return usageError("stop", fmt.Sprintf("--confirm-timeout %v: give a positive duration, e.g. 10s", confirm))
	case *holdingGPU && !idle:
		return usageError("stop", "--holding-gpu goes with --idle-for")
	case *until != "" && !*holdDown:
		return usageError("stop", "--until goes with --hold")
	case *exit && (*holdDown || *message != ""):
		return usageError("stop", "--exit ends the supervisor; --hold and --message need it to stay")
	case btoi(*every)+btoi(idle)+fs.NArg() != 1:
		return usageError("stop", "give one kernel id, --all, or --idle-for DURATION")
	}
	// Root stops any user's kernel by id, as ps lists them all; a record
	// in a user's directory is then acted on only where that user owns
	// what it names (see record.Finish).
	only := stateDirNamed(fs)
	all := os.Geteuid() == 0 && !only
	states, refused, err := collectStates(*stateDir, all, only)
	for _, r := range refused {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: %s\n", record.Printable(r.Error()))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: %v\n", err)
		return 1
	}
	n := gpu.Connect(*nvmlLib, "")
	defer n.Close()
	how := stopHow{timeout: timeout, confirm: confirm, exit: *exit, by: record.UserName(os.Geteuid()),
		hold: *holdDown, message: *message}
	if *until != "" {
		t, err := parseUntil(*until, time.Now())
		if err != nil {
			return usageError("stop", fmt.Sprintf("--until %q: %v", *until, err))
		}
		how.until = t
	}
	if idle {
		how.why = "idle for " + idleFor.String()
		return stopIdle(ofUser(states, uid), idleFor, *holdingGPU, n, how)
	}
	chosen := chooseKernels(states, id, *every, uid)
	switch {
	case len(chosen) == 0 && *every:
		fmt.Println("no supervised kernels" + ofUserText(uid))
		return 0
	case len(chosen) == 0 && len(id) < minIDPrefix:
		return usageError("stop", fmt.Sprintf("no kernel %q; give the whole id or at least %d characters of it", fs.Arg(0), minIDPrefix))
	case len(chosen) == 0:
		return usageError("stop", fmt.Sprintf("no kernel %q%s", fs.Arg(0), ofUserText(uid)))
	case len(chosen) > 1 && !*every:
		return usageError("stop", ambiguous(fs.Arg(0), chosen))
	}
	if err := n.Err(); err != nil {
		fmt.Printf("GPU release not checked: %v\n", err)
	}
	code := 0
	for _, o := range stopEach(chosen, func(st record.State, w *stopOutput) {
		if _, err := stopOne(w, st, n, how); err != nil {
			w.errorf("tfgpu-kernel stop: kernel %s: %s\n", stopLabel(st), record.Printable(err.Error()))
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
func stopEach(states []record.State, stop func(record.State, *stopOutput)) []stopOutput {
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
		fmt.Print(outs[i].out.String())
		fmt.Fprint(os.Stderr, outs[i].err.String())
	}
	return outs
}

// stopOne asks a live, running supervisor to stop (SIGTERM: it kills the
// tree itself and Jupyter sees the kernel end); when it does not within the
// timeout, or is stopped or gone, the tree is killed through its record
// (record.FinishKernel), and the GPU release confirmed.
func stopOne(w *stopOutput, st record.State, n gpu.Session, opts stopHow) (record.Finished, error) {
	timeout, confirm := opts.timeout, opts.confirm
	d, err := record.OpenDir(st.Dir, false, true)
	if err != nil {
		return record.Finished{}, err
	}
	defer d.Close()
	if !opts.exit && st.Parks && st.SupervisorAlive() && !st.SupervisorStopped() {
		if st.Phase == record.PhaseParked && !opts.hold {
			w.printf("kernel %s is parked already: its next request starts a fresh kernel\n", stopLabel(st))
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
	f, err := d.FinishKernel(st, record.FinishOptions{GPU: n, KillTimeout: timeout, ConfirmTimeout: confirm, BeforeKill: askSupervisor})
	if err != nil {
		return f, err
	}
	w.printf("stopped kernel %s: %s; %d processes killed; %v\n", stopLabel(st), how, f.Killed, time.Since(start).Round(time.Millisecond))
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

// chooseKernels is every kernel (all), else the kernel whose id is id,
// else those whose id starts with id when id has at least minIDPrefix
// characters (a typo of one character must not stop a kernel); with uid
// >= 0, of that user's only. An exact id always wins: a record planted
// with the id "<yours>x" (ids are public, in the supervisor's command
// line) must not make a kernel's own id ambiguous. Two users' kernels of
// the same id are both chosen, and the caller refuses to act on either
// (ambiguous): the one meant is named USER:ID.
func chooseKernels(states []record.State, id string, all bool, uid int) []record.State {
	states = ofUser(states, uid)
	if all {
		return states
	}
	var exact, prefixed []record.State
	for _, st := range states {
		switch {
		case st.KernelID == id:
			exact = append(exact, st)
		case len(id) >= minIDPrefix && strings.HasPrefix(st.KernelID, id):
			prefixed = append(prefixed, st)
		}
	}
	if len(exact) > 0 {
		return exact
	}
	return prefixed
}

// ofUser is the kernels of states whose owner is uid (all when uid < 0).
func ofUser(states []record.State, uid int) []record.State {
	if uid < 0 {
		return states
	}
	return slices.DeleteFunc(slices.Clone(states), func(st record.State) bool { return st.Owner != uid })
}

func ofUserText(uid int) string {
	if uid < 0 {
		return ""
	}
	return " of user " + record.UserName(uid)
}

// kernelNamed reads the kernel an operator named, ID or USER:ID, and
// --user: the uid to narrow to (-1: any) and the id (or prefix).
func kernelNamed(arg, userFlag string) (uid int, id string, err error) {
	uid, id, err = record.ParseKernelName(arg, lookupUser)
	if err != nil {
		return -1, "", fmt.Errorf("%q: %v", arg, err)
	}
	if userFlag == "" {
		return uid, id, nil
	}
	u, err := lookupUser(userFlag)
	switch {
	case err != nil:
		return -1, "", fmt.Errorf("--user %q: %v", userFlag, err)
	case uid >= 0 && uid != u:
		return -1, "", fmt.Errorf("--user %q and %q name two users", userFlag, arg)
	}
	return u, id, nil
}

// lookupUser is the uid of a login name, or of a uid given as digits.
func lookupUser(name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return -1, fmt.Errorf("no user %q", name)
	}
	return strconv.Atoi(u.Uid)
}

// ambiguous is the refusal of a name that matches several kernels, each
// named as USER:ID so that the one meant can be given.
func ambiguous(arg string, chosen []record.State) string {
	var names []string
	for _, st := range chosen {
		names = append(names, record.UserName(st.Owner)+":"+st.KernelID)
	}
	slices.Sort(names)
	return fmt.Sprintf("%q names %d kernels: %s; give USER:ID, or more of the id", arg, len(chosen), strings.Join(names, ", "))
}

// minIDPrefix is the shortest prefix of a kernel id stop takes.
const minIDPrefix = 4

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stopIdle stops the running kernels that have been idle (no cell
// running) at least idleFor, with holdingGPU only those whose tree holds
// GPU memory, and says what it freed. A kernel that runs a cell is never
// stopped: each is checked again just before it is (a cell may have
// started since the list was read), and one whose execution state is not
// known is left alone (docs/operating.md#idle-kernels).
func stopIdle(states []record.State, idleFor time.Duration, holdingGPU bool, n gpu.Session, how stopHow) int {
	var holders []gpu.Holder
	if holdingGPU {
		hs, err := n.Holders()
		if err == nil && gpu.Mode(hs) == gpu.ByBaseline {
			err = errors.New("NVML's pids are not this PID namespace's")
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: --holding-gpu: cannot tell which kernels hold GPU memory: %s\n", record.Printable(err.Error()))
			return 1
		}
		holders = hs
	} else if err := n.Err(); err != nil {
		fmt.Printf("GPU release not checked: %v\n", err)
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
	outs := stopEach(chosen, func(st record.State, w *stopOutput) {
		if a, err := record.ReadActivity(st); err != nil || a.Busy || !a.Since.Equal(st.Activity.Since) {
			w.skipped = true // a cell may have started since the list was read
			return
		}
		c := cands[st.File()]
		label := stopLabel(st)
		holding := ""
		if len(c.held) > 0 {
			holding = ", holding " + (gpu.Result{Released: c.held}).ReleasedText()
		}
		w.printf("kernel %s: idle for %v%s: stopping\n", label, c.idle.Round(time.Second), holding)
		var err error
		if w.finished, err = stopOne(w, st, n, how); err != nil {
			w.errorf("tfgpu-kernel stop: kernel %s: %s\n", stopLabel(st), record.Printable(err.Error()))
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
	fmt.Println(summary)
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

// stopHow is how stop goes about each kernel.
type stopHow struct {
	timeout, confirm time.Duration
	exit             bool   // end the supervisor (SIGTERM), not park the kernel
	by, why          string // for the order: who stops it, and why
	hold             bool   // keep it down: until until (zero: until started again)
	until            time.Time
	message          string // for the notebook's user
}

// order is the Order for one kernel.
func (h stopHow) order(now time.Time) record.Order {
	return record.Order{By: h.by, Why: h.why, At: now.UTC(), Hold: h.hold, HoldUntil: h.until, Message: h.message}
}

// parseUntil reads --until: a clock time today (tomorrow when it has
// passed), a date and time, RFC 3339, or a duration from now.
func parseUntil(s string, now time.Time) (time.Time, error) {
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

// stopLabel names a kernel in stop's and start's results as they take
// it, USER:ID, with its notebook: another user's kernel of the same id is
// never taken for it.
func stopLabel(st record.State) string {
	label := record.UserName(st.Owner) + ":" + st.KernelID
	if st.Session != "" {
		label += " (" + record.Printable(st.Session) + ")"
	}
	return label
}

// parkOne leaves an order for st's supervisor and signals it; the
// supervisor kills the tree, confirms the GPU release and records its
// kernel parked (wrapper/park.go). ok is false when it did not within the
// timeout (an older version, or a supervisor too busy): the order is
// taken back, and stopOne ends the supervisor instead.
func parkOne(w *stopOutput, st record.State, how stopHow) (f record.Finished, ok bool, err error) {
	// The order goes into the directory the supervisor holds open, never
	// through a path its user may have swapped for another's directory.
	notParked := func(why error) (record.Finished, bool, error) {
		w.printf("kernel %s: its supervisor could not be asked to park it (%s); asking it to stop\n",
			stopLabel(st), record.Printable(why.Error()))
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
	for deadline := start.Add(how.timeout); time.Now().Before(deadline) && st.SupervisorAlive(); time.Sleep(20 * time.Millisecond) {
		now, err := d.StateOf(st.KernelID)
		if err != nil || now.SupervisorPID != st.SupervisorPID || now.Phase != record.PhaseParked || now.Parked == nil ||
			now.Parked.Hold != how.hold || (now.Parked.At.Before(start.Add(-time.Second)) && st.Phase != record.PhaseParked) {
			continue
		}
		p := now.Parked
		if st.Phase == record.PhaseParked { // parked before: now held
			w.printf("kernel %s is held down %s\n", stopLabel(st), holdText(p))
			return f, true, nil
		}
		f = record.Finished{Killed: p.Killed, Took: time.Since(start)}
		next := "the next cell starts a fresh kernel"
		if p.Hold {
			next = "held down " + holdText(p)
		}
		w.printf("stopped kernel %s: parked by its supervisor, which keeps its place (%s); %d processes killed; %v\n",
			stopLabel(st), next, p.Killed, f.Took.Round(time.Millisecond))
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
	return notParked(fmt.Errorf("it did not within %v", how.timeout))
}

// holdText says until when a parked kernel is held down.
func holdText(p *record.Parked) string {
	if p.HoldUntil.IsZero() {
		return "until started again (tfgpu-kernel start)"
	}
	return "until " + p.HoldUntil.Local().Format("Jan 2 15:04")
}

// cmdStart lifts the hold of parked kernels (stop --hold):
//
//	tfgpu-kernel start ID|--all
func cmdStart(args []string) int {
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	every := fs.Bool("all", false, "every held kernel")
	userName := fs.String("user", "", "only the kernels of `USER` (a login name or uid); USER:ID says the same for one kernel")
	var timeout time.Duration
	durationVar(fs, &timeout, "timeout", 15*time.Second, "how long a kernel's supervisor may take to answer")
	stateDir := fs.String("state-dir", record.DefaultDir(), "`DIR` where supervisors record their kernels")
	if _, code, done := parseFlags(fs, args, "tfgpu-kernel start 5b2c1e7a   # a held kernel's id, or a unique prefix of one; alice:5b2c1e7a for alice's"); done {
		return code
	}
	uid, id, err := kernelNamed(fs.Arg(0), *userName)
	if err != nil {
		return usageError("start", err.Error())
	}
	switch {
	case timeout <= 0:
		return usageError("start", fmt.Sprintf("--timeout %v: give a positive duration, e.g. 15s", timeout))
	case btoi(*every)+fs.NArg() != 1:
		return usageError("start", "give one kernel id, or --all")
	}
	only := stateDirNamed(fs)
	states, refused, err := collectStates(*stateDir, os.Geteuid() == 0 && !only, only)
	for _, r := range refused {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel start: %s\n", record.Printable(r.Error()))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel start: %v\n", err)
		return 1
	}
	chosen := chooseKernels(states, id, *every, uid)
	if *every {
		chosen = slices.DeleteFunc(chosen, func(st record.State) bool { return st.Parked == nil || !st.Parked.Hold })
	}
	switch {
	case len(chosen) == 0 && *every:
		fmt.Println("no held kernels" + ofUserText(uid))
		return 0
	case len(chosen) == 0 && len(id) < minIDPrefix:
		return usageError("start", fmt.Sprintf("no kernel %q; give the whole id or at least %d characters of it", fs.Arg(0), minIDPrefix))
	case len(chosen) == 0:
		return usageError("start", fmt.Sprintf("no kernel %q%s", fs.Arg(0), ofUserText(uid)))
	case len(chosen) > 1 && !*every:
		return usageError("start", ambiguous(fs.Arg(0), chosen))
	}
	code := 0
	for _, o := range stopEach(chosen, func(st record.State, w *stopOutput) {
		if err := liftHold(w, st, timeout); err != nil {
			w.errorf("tfgpu-kernel start: kernel %s: %s\n", stopLabel(st), record.Printable(err.Error()))
		}
	}) {
		if o.failed {
			code = 1
		}
	}
	return code
}

// liftHold asks st's supervisor to lift its kernel's hold, and waits until
// its record says so.
func liftHold(w *stopOutput, st record.State, timeout time.Duration) error {
	switch {
	case !st.SupervisorAlive() || st.SupervisorStopped():
		return errors.New("its supervisor is not running")
	case st.Phase != record.PhaseParked || st.Parked == nil:
		return errors.New("it is not stopped (" + st.Phase + ")")
	case !st.Parked.Hold:
		w.printf("kernel %s is not held: its next request starts a fresh kernel\n", stopLabel(st))
		return nil
	}
	d, err := record.SupervisorDir(st) // as parkOne: the directory it holds open
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.WriteOrder(st.KernelID, record.Order{By: record.UserName(os.Geteuid()), At: time.Now().UTC(), Start: true}); err != nil {
		return err
	}
	if err := syscall.Kill(st.SupervisorPID, syscall.SIGUSR1); err != nil {
		_, _ = d.TakeOrder(st.KernelID)
		return err
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if now, err := d.StateOf(st.KernelID); err == nil && now.Parked != nil && !now.Parked.Hold {
			w.printf("kernel %s: hold lifted; its next request starts a fresh kernel\n", stopLabel(st))
			return nil
		}
	}
	_, _ = d.TakeOrder(st.KernelID)
	return fmt.Errorf("its supervisor did not lift the hold within %v", timeout)
}
