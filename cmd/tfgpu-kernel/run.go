package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/runflags"
	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// cmdRun is what the kernelspec's argv runs:
//
//	tfgpu-kernel run [flags] -f {connection_file} -- python -m ipykernel_launcher -f {connection_file}
//
// It supervises the kernel, unless the kernel's standby takes over its
// start (wrapper.Run decides, on one fact: the standby's answer); it then
// is the kernel's stub (docs/design.md#processes).
func cmdRun(args []string) int {
	cfg, code, ok := runflags.Config("run", args)
	if !ok {
		return code
	}
	return wrapper.Run(context.Background(), cfg)
}

// cmdStandby is the hidden role a supervisor starts this program in for its
// kernel's next restart (docs/design.md#spare-kernel):
//
//	tfgpu-kernel standby KERNEL_ID      (fd 3: the leash, its first line run's arguments)
//
// Its command line names its kernel, short, for ps; what it is to do is
// run's arguments, which the supervisor writes as the leash's first line.
func cmdStandby(args []string) int {
	if len(args) != 1 || !record.ValidKernelID(args[0]) {
		return usageError("standby", "started by a supervisor only, as 'tfgpu-kernel standby KERNEL_ID' with its leash on fd 3")
	}
	leash := os.NewFile(3, "leash")
	if leash == nil {
		return usageError("standby", "no leash on fd 3")
	}
	var runArgs []string
	line, err := readLine(leash, 1<<20)
	if err == nil {
		err = json.Unmarshal(line, &runArgs)
	}
	if err != nil {
		leash.Close()
		return usageError("standby", fmt.Sprintf("the leash's first line is not run's arguments: %v", err))
	}
	cfg, code, ok := runflags.Config("run", runArgs)
	if ok && cfg.Refusal != "" {
		// Not expected: its supervisor took the same arguments and
		// environment. A standby never refuses in a kernel's place.
		code, ok = wrapper.ExitUsage, false
	}
	if !ok {
		leash.Close()
		return code
	}
	if id := jmsg.KernelID(cfg.ConnFile); id != args[0] {
		leash.Close()
		return usageError("standby", fmt.Sprintf("kernel %q is not the connection file's (%q)", args[0], record.Printable(id)))
	}
	cfg.Standby, cfg.Leash = true, leash
	return wrapper.Run(context.Background(), cfg)
}

// cmdWatch is the hidden role a supervisor starts this program in to
// finish its kernel should it be SIGKILLed (wrapper/watcher.go):
//
//	tfgpu-kernel watch KERNEL_ID        (stdin: the supervisor's messages)
func cmdWatch(args []string) int {
	if len(args) != 1 {
		return usageError("watch", "started by a supervisor only, as 'tfgpu-kernel watch KERNEL_ID'")
	}
	return wrapper.Watch(os.Stdin, os.Stderr)
}

// readLine reads f up to a newline, a byte at a time (what follows on f is
// the caller's), at most max bytes.
func readLine(f *os.File, max int) ([]byte, error) {
	var line []byte
	b := make([]byte, 1)
	for len(line) < max {
		n, err := f.Read(b)
		if n == 1 && b[0] == '\n' {
			return line, nil
		}
		if n == 1 {
			line = append(line, b[0])
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("longer than %d bytes", max)
}

// gpuSoname is NVML's soname, for the help text.
const gpuSoname = runflags.GPUSoname

// usageError says a usage error of cmd, one line on stderr, and returns
// its exit code, 2.
func usageError(cmd, msg string) int { return runflags.UsageError(cmd, msg) }
