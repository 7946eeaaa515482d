package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/wrapper"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
)

// cmdStop kills a supervised kernel's whole tree and waits until it is gone,
// whether its supervisor is running, hung or dead:
//
//	tfgpu-kernel stop ID|--all
func cmdStop(args []string) int {
	fs := flag.NewFlagSet("stop", flag.ContinueOnError)
	every := fs.Bool("all", false, "stop every supervised kernel")
	timeout := fs.Duration("timeout", 15*time.Second, "how long a kernel's supervisor may take to stop it (it also confirms the GPU release)")
	stateDir := fs.String("state-dir", wrapper.StateDir(), "where supervisors record their kernels")
	confirm := fs.Duration("confirm-timeout", wrapper.DefaultConfirmTimeout, "how long to wait for NVML to list none of the tree's GPU contexts")
	nvmlLib := fs.String("nvml-library", "", "NVML library file to load; empty: "+gpuSoname+" through the dynamic loader")
	if code, done := parseFlags(fs, args, "tfgpu-kernel stop 5b2c1e7a   # a kernel id, or a unique prefix of one"); done {
		return code
	}
	if *every == (fs.NArg() == 1) || fs.NArg() > 1 {
		return usageError("stop", "give one kernel id, or --all")
	}
	// Root stops any user's kernel by id, as ps lists them all; a record
	// in a user's directory is then acted on only where that user owns
	// what it names (see wrapper.Finish).
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "state-dir" })
	all := os.Geteuid() == 0 && !explicit && os.Getenv("TFGPU_STATE_DIR") == ""
	var states []wrapper.State
	for _, dir := range wrapper.StateDirs(*stateDir, all) {
		sts, refused, err := wrapper.ReadStates(dir)
		for _, r := range refused {
			fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: %s\n", wrapper.Printable(r.Error()))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: %v\n", err)
			if dir == *stateDir {
				return 1
			}
			continue
		}
		states = append(states, sts...)
	}
	var chosen []wrapper.State
	for _, st := range states {
		if *every || strings.HasPrefix(st.KernelID, fs.Arg(0)) {
			chosen = append(chosen, st)
		}
	}
	switch {
	case len(chosen) == 0 && *every:
		fmt.Println("no supervised kernels")
		return 0
	case len(chosen) == 0:
		return usageError("stop", fmt.Sprintf("no kernel %q in %s", fs.Arg(0), *stateDir))
	case len(chosen) > 1 && !*every:
		return usageError("stop", fmt.Sprintf("%q names %d kernels; give more of the id", fs.Arg(0), len(chosen)))
	}
	n, gerr := gpu.Open(*nvmlLib, "")
	if gerr != nil {
		fmt.Printf("GPU release not checked: %v\n", gerr)
	} else {
		defer n.Close()
	}
	code := 0
	for _, st := range chosen {
		if err := stopOne(st.Dir, st, *timeout, n, *confirm); err != nil {
			fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: kernel %s: %s\n", st.KernelID, wrapper.Printable(err.Error()))
			code = 1
		}
	}
	return code
}

// stopOne asks a live, running supervisor to stop (SIGTERM: it kills the
// tree itself and Jupyter sees the kernel end); when it does not within the
// timeout, or is stopped or gone, the tree is killed through its state.
func stopOne(dir string, st wrapper.State, timeout time.Duration, n *gpu.NVML, confirm time.Duration) error {
	start := time.Now()
	var old *gpu.Old
	if n != nil {
		if hs, err := n.Holders(); err == nil {
			old = gpu.Watch(hs, wrapper.TreePids(st), nil)
		}
	}
	how := "supervisor gone"
	if st.SupervisorAlive() && !st.SupervisorStopped() {
		how = "supervisor asked to stop"
		_ = syscall.Kill(st.SupervisorPID, syscall.SIGTERM)
		for deadline := start.Add(timeout); st.SupervisorAlive() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if st.SupervisorAlive() {
			how = "supervisor did not stop"
		}
	} else if st.SupervisorAlive() {
		how = "supervisor stopped (SIGSTOP)"
	}
	killed, err := wrapper.Finish(dir, st, timeout)
	if err != nil {
		return err
	}
	label := st.KernelID
	if st.Session != "" {
		label += " (" + wrapper.Printable(st.Session) + ")"
	}
	fmt.Printf("stopped kernel %s: %s; %d processes killed; %v\n", label, how, killed, time.Since(start).Round(time.Millisecond))
	if old == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), confirm)
	defer cancel()
	res, err := gpu.Confirm(ctx, n, *old, 25*time.Millisecond)
	switch {
	case err != nil:
		return fmt.Errorf("GPU release not confirmed: %w", err)
	case len(res.Held) > 0:
		return fmt.Errorf("GPU memory still held %v after the kill: %s", confirm, res.HeldText())
	}
	fmt.Printf("GPU memory released: %s (NVML, by %s, %v)\n", res.ReleasedText(), res.By, res.Took.Round(time.Millisecond))
	return nil
}
