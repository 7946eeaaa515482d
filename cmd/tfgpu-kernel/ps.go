package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/control"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// cmdPs lists the supervised kernels with their processes, memory, GPU
// memory and activity (root: every user's):
//
//	tfgpu-kernel ps [--json | --format table|json|prometheus]
func cmdPs(args []string) int {
	fs := flag.NewFlagSet("ps", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array, one object per kernel (--format json)")
	format := fs.String("format", "table", "`FORMAT`: table, json, or prometheus (the text exposition format, for node_exporter's textfile collector)")
	stateDir := fs.String("state-dir", record.DefaultDir(), "`DIR` where supervisors record their kernels")
	nvmlLib := fs.String("nvml-library", "", "NVML library `FILE` to load; empty: "+gpuSoname+" through the dynamic loader")
	if _, code, done := parseFlags(fs, args, "tfgpu-kernel ps --json | jq '.[] | {kernel_id, gpu}'"); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageError("ps", fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if *asJSON {
		*format = "json"
	}
	if *format != "table" && *format != "json" && *format != "prometheus" {
		return usageError("ps", fmt.Sprintf("--format %q: give table, json or prometheus", *format))
	}
	// Root lists every user's kernels, found from the running supervisors
	// (record.Collect), whatever state directory each chose.
	only := stateDirNamed(fs)
	states, refused, err := control.Collect(*stateDir, os.Geteuid() == 0 && !only, only)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tfgpu-kernel ps: %v\n", err)
		return 1
	}
	rows, note := record.PS(states, *nvmlLib)
	for _, r := range refused { // what users wrote is shown, never obeyed
		fmt.Fprintf(os.Stderr, "tfgpu-kernel ps: %s\n", record.Printable(r.Error()))
	}
	switch *format {
	case "prometheus":
		if err := control.Prometheus(os.Stdout, rows, note, time.Now()); err != nil {
			fmt.Fprintf(os.Stderr, "tfgpu-kernel ps: %v\n", err)
			return 1
		}
		return 0
	case "json":
		if rows == nil {
			rows = []record.KernelStatus{}
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return 1
		}
		return 0
	}
	control.Table(os.Stdout, rows, note, time.Now())
	return 0
}
