package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tfgpu/tfgpu-kernel/internal/control"
	"github.com/tfgpu/tfgpu-kernel/internal/doctor"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// cmdDoctor prints what the supervisor finds on this host, one finding a
// line, each problem with the command that fixes it. Exit 0 when healthy,
// 1 otherwise.
func cmdDoctor(args []string) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	stateDir := fs.String("state-dir", record.DefaultDir(), "`DIR` where supervisors record their kernels")
	nvmlLib := fs.String("nvml-library", "", "NVML library `FILE` to load; empty: "+gpuSoname+" through the dynamic loader")
	if _, code, done := parseFlags(fs, args, "tfgpu-kernel doctor"); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageError("doctor", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	fmt.Printf("tfgpu-kernel %s\n", version)
	problems := 0
	only := stateDirNamed(fs)
	all := os.Geteuid() == 0 && !only
	kernels := func() ([]record.State, []error, error) { return control.Collect(*stateDir, all, only) }
	for _, f := range doctor.All(*stateDir, *nvmlLib, all, kernels) {
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
