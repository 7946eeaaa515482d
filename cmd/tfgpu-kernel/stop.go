package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// cmdStop kills a supervised kernel's whole tree and waits until it is gone,
// whether its supervisor is running, hung or dead:
//
//	tfgpu-kernel stop ID|--all
func cmdStop(args []string) int {
	fs := flag.NewFlagSet("stop", flag.ContinueOnError)
	every := fs.Bool("all", false, "stop every supervised kernel")
	timeout := fs.Duration("timeout", 15*time.Second, "how long a kernel's supervisor may take to stop it (it also confirms the GPU release)")
	stateDir := fs.String("state-dir", record.DefaultDir(), "where supervisors record their kernels")
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
	// what it names (see record.Finish).
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "state-dir" })
	all := os.Geteuid() == 0 && !explicit && os.Getenv("TFGPU_STATE_DIR") == ""
	var states []record.State
	for _, dir := range record.StateDirs(*stateDir, all) {
		sts, refused, err := record.ReadStates(dir)
		for _, r := range refused {
			fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: %s\n", record.Printable(r.Error()))
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
	var chosen []record.State
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
	n := gpu.Connect(*nvmlLib, "")
	defer n.Close()
	if err := n.Err(); err != nil {
		fmt.Printf("GPU release not checked: %v\n", err)
	}
	code := 0
	for _, st := range chosen {
		if err := stopOne(st, *timeout, n, *confirm); err != nil {
			fmt.Fprintf(os.Stderr, "tfgpu-kernel stop: kernel %s: %s\n", st.KernelID, record.Printable(err.Error()))
			code = 1
		}
	}
	return code
}

// stopOne asks a live, running supervisor to stop (SIGTERM: it kills the
// tree itself and Jupyter sees the kernel end); when it does not within the
// timeout, or is stopped or gone, the tree is killed through its record
// (record.FinishKernel), and the GPU release confirmed.
func stopOne(st record.State, timeout time.Duration, n gpu.Session, confirm time.Duration) error {
	d, err := record.OpenDir(st.Dir, false, true)
	if err != nil {
		return err
	}
	defer d.Close()
	how := "supervisor gone"
	askSupervisor := func() {
		switch {
		case st.SupervisorAlive() && st.SupervisorStopped():
			how = "supervisor stopped (SIGSTOP)"
		case st.SupervisorAlive():
			how = "supervisor asked to stop"
			_ = syscall.Kill(st.SupervisorPID, syscall.SIGTERM)
			for deadline := time.Now().Add(timeout); st.SupervisorAlive() && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if st.SupervisorAlive() {
				how = "supervisor did not stop"
			}
		}
	}
	start := time.Now()
	f, err := d.FinishKernel(st, record.FinishOptions{GPU: n, KillTimeout: timeout, ConfirmTimeout: confirm, BeforeKill: askSupervisor})
	if err != nil {
		return err
	}
	label := st.KernelID
	if st.Session != "" {
		label += " (" + record.Printable(st.Session) + ")"
	}
	fmt.Printf("stopped kernel %s: %s; %d processes killed; %v\n", label, how, f.Killed, time.Since(start).Round(time.Millisecond))
	switch {
	case f.GPU == nil:
		return nil // not checked (said above)
	case f.GPUErr != nil:
		return fmt.Errorf("GPU release not confirmed: %w", f.GPUErr)
	case len(f.GPU.Held) > 0:
		return fmt.Errorf("GPU memory still held %v after the kill: %s", confirm, f.GPU.HeldText())
	}
	fmt.Printf("GPU memory released: %s (NVML, by %s, %v)\n", f.GPU.ReleasedText(), f.GPU.By, f.GPU.Took.Round(time.Millisecond))
	return nil
}
