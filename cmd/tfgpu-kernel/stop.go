package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/control"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/runflags"
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
	var f control.StopFlags
	fs.BoolVar(&f.All, "all", false, "stop every supervised kernel")
	userName := fs.String("user", "", "only the kernels of `USER` (a login name or uid), with an ID, --all or --idle-for; USER:ID says the same for one kernel")
	fs.BoolVar(&f.Exit, "exit", false, "end the supervisors too: Jupyter then sees the kernels die (and may restart them)")
	fs.BoolVar(&f.Hold, "hold", false, "keep the kernels down: cells are refused, saying so, until --until or 'tfgpu-kernel start'")
	fs.StringVar(&f.Until, "until", "", "with --hold: until `TIME` (15:00, 2026-12-24 08:00, or a duration such as 2h)")
	fs.StringVar(&f.Message, "message", "", "`TEXT` the notebook's user is told, e.g. \"GPU maintenance until 15:00\"")
	runflags.DurationVar(fs, &f.IdleFor, "idle-for", 0, "stop the running kernels idle (no cell running) at least this long, e.g. 2h")
	fs.BoolVar(&f.HoldingGPU, "holding-gpu", false, "with --idle-for: only those whose tree holds GPU memory")
	runflags.DurationVar(fs, &f.Timeout, "timeout", 15*time.Second, "how long a kernel's supervisor may take to stop it (it also confirms the GPU release)")
	stateDir := fs.String("state-dir", record.DefaultDir(), "`DIR` where supervisors record their kernels")
	runflags.DurationVar(fs, &f.Confirm, "confirm-timeout", wrapper.DefaultConfirmTimeout, "how long to wait for NVML to list none of the tree's GPU contexts")
	nvmlLib := fs.String("nvml-library", "", "NVML library `FILE` to load; empty: "+gpuSoname+" through the dynamic loader")
	if _, code, done := parseFlags(fs, args, "tfgpu-kernel stop 5b2c1e7a   # a kernel id, or a unique prefix of one; alice:5b2c1e7a for alice's"); done {
		return code
	}
	uid, id, err := control.KernelNamed(fs.Arg(0), *userName)
	if err != nil {
		return usageError("stop", err.Error())
	}
	f.Args = fs.NArg()
	if err := control.CheckStop(f); err != nil {
		return usageError("stop", err.Error())
	}
	// Root stops any user's kernel by id, as ps lists them all; a record
	// in a user's directory is then acted on only where that user owns
	// what it names (see record.Finish).
	only := stateDirNamed(fs)
	all := os.Geteuid() == 0 && !only
	states, refused, err := control.Collect(*stateDir, all, only)
	for _, r := range refused {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: %s\n", record.Printable(r.Error()))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: %v\n", err)
		return 1
	}
	n := gpu.Connect(*nvmlLib, "")
	defer n.Close()
	how := control.How{Timeout: f.Timeout, Confirm: f.Confirm, Exit: f.Exit, By: record.UserName(os.Geteuid()),
		Hold: f.Hold, Message: f.Message}
	if f.Until != "" {
		t, err := control.ParseUntil(f.Until, time.Now())
		if err != nil {
			return usageError("stop", fmt.Sprintf("--until %q: %v", f.Until, err))
		}
		how.Until = t
	}
	if f.IdleFor > 0 {
		return control.StopIdle(os.Stdout, os.Stderr, control.OfUser(states, uid), f.IdleFor, f.HoldingGPU, n, how)
	}
	chosen, err := control.Pick(states, fs.Arg(0), id, f.All, uid, nil)
	switch {
	case err != nil:
		return usageError("stop", err.Error())
	case len(chosen) == 0:
		fmt.Println("no supervised kernels" + control.OfUserText(uid))
		return 0
	}
	return control.Stop(os.Stdout, os.Stderr, chosen, n, how)
}

// cmdStart lifts the hold of parked kernels (stop --hold):
//
//	tfgpu-kernel start ID|--all
func cmdStart(args []string) int {
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	every := fs.Bool("all", false, "every held kernel")
	userName := fs.String("user", "", "only the kernels of `USER` (a login name or uid); USER:ID says the same for one kernel")
	var timeout time.Duration
	runflags.DurationVar(fs, &timeout, "timeout", 15*time.Second, "how long a kernel's supervisor may take to answer")
	stateDir := fs.String("state-dir", record.DefaultDir(), "`DIR` where supervisors record their kernels")
	if _, code, done := parseFlags(fs, args, "tfgpu-kernel start 5b2c1e7a   # a held kernel's id, or a unique prefix of one; alice:5b2c1e7a for alice's"); done {
		return code
	}
	uid, id, err := control.KernelNamed(fs.Arg(0), *userName)
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
	states, refused, err := control.Collect(*stateDir, os.Geteuid() == 0 && !only, only)
	for _, r := range refused {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel start: %s\n", record.Printable(r.Error()))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel start: %v\n", err)
		return 1
	}
	held := func(st record.State) bool { return st.Parked != nil && st.Parked.Hold }
	chosen, err := control.Pick(states, fs.Arg(0), id, *every, uid, held)
	switch {
	case err != nil:
		return usageError("start", err.Error())
	case len(chosen) == 0:
		fmt.Println("no held kernels" + control.OfUserText(uid))
		return 0
	}
	return control.Start(os.Stdout, os.Stderr, chosen, timeout)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
