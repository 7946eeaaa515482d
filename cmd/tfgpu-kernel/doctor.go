package main

import (
	"flag"
	"fmt"

	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// cmdDoctor prints what the supervisor finds on this host, one finding a
// line, each problem with the command that fixes it. Exit 0 when healthy,
// 1 otherwise.
func cmdDoctor(args []string) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	stateDir := fs.String("state-dir", wrapper.StateDir(), "where supervisors record their kernels")
	nvmlLib := fs.String("nvml-library", "", "NVML library file to load; empty: "+gpuSoname+" through the dynamic loader")
	if code, done := parseFlags(fs, args, "tfgpu-kernel doctor"); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageError("doctor", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	fmt.Printf("tfgpu-kernel %s\n", version)
	problems := 0
	for _, f := range append(wrapper.Diagnose(*stateDir), wrapper.DiagnoseGPU(*nvmlLib)...) {
		mark := "ok "
		if f.Problem {
			mark = "!! "
			problems++
		}
		fmt.Printf("%s%-13s %s\n", mark, f.Topic+":", f.Text)
		if f.Fix != "" {
			fmt.Printf("   %-13s %s\n", "fix:", f.Fix)
		}
	}
	if problems > 0 {
		fmt.Printf("%d problem(s)\n", problems)
		return 1
	}
	fmt.Println("no problems")
	return 0
}
