package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// cmdRun is what the kernelspec's argv runs:
//
//	tfgpu-kernel run [flags] -f {connection_file} -- python -m ipykernel_launcher -f {connection_file}
func cmdRun(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	conn := fs.String("f", "", "the connection file Jupyter wrote (required)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	grace := fs.Duration("shutdown-grace", wrapper.DefaultShutdownGrace, "how long the kernel may take to exit by itself after shutdown_request")
	killTimeout := fs.Duration("kill-timeout", wrapper.DefaultKillTimeout, "how long killing the kernel's tree may take")
	inner := fs.String("inner-transport", "auto", "transport to the kernel: auto (ipc, else tcp), ipc, tcp")
	stateDir := fs.String("state-dir", wrapper.StateDir(), "where the kernel's state file goes (read by 'tfgpu-kernel stop')")
	memLimit := fs.String("memory-limit", "", "memory the kernel's whole tree may use, e.g. 8G (powers of 1024); empty: no limit")
	cg := fs.String("cgroup", wrapper.CgroupAuto, "containment: auto (first of v2, systemd, v1 that works, else none), v2, systemd (user scope via systemd-run), v1 (freezer), none (process group and /proc)")
	nvmlLib := fs.String("nvml-library", "", "NVML library file to load; empty: "+gpuSoname+" through the dynamic loader (LD_LIBRARY_PATH)")
	confirm := fs.Duration("confirm-timeout", wrapper.DefaultConfirmTimeout, "how long to wait for NVML to list none of a killed tree's GPU contexts")
	example := "tfgpu-kernel run -f kernel-1.json -- /usr/bin/python3 -m ipykernel_launcher -f kernel-1.json"
	if code, done := parseFlags(fs, args, example); done {
		return code
	}
	argv := fs.Args()
	switch {
	case *conn == "":
		return usageError("run", "-f CONNECTION_FILE is required")
	case len(argv) == 0:
		return usageError("run", "no kernel command given after --")
	case !slices.Contains([]string{wrapper.CgroupAuto, wrapper.CgroupV2, wrapper.CgroupSystemd, wrapper.CgroupV1, wrapper.CgroupNone}, *cg):
		return usageError("run", fmt.Sprintf("--cgroup %q: want auto, v2, systemd, v1 or none", *cg))
	case *confirm <= 0:
		return usageError("run", fmt.Sprintf("--confirm-timeout %v: want a positive duration such as 10s", *confirm))
	case *inner != "auto" && *inner != "ipc" && *inner != "tcp":
		return usageError("run", fmt.Sprintf("--inner-transport %q: want auto, ipc or tcp", *inner))
	}
	var limit int64
	if *memLimit != "" {
		var err error
		if limit, err = cgroup.ParseSize(*memLimit); err != nil || limit <= 0 {
			return usageError("run", fmt.Sprintf("--memory-limit %q: want a size such as 8G or 300M", *memLimit))
		}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return usageError("run", fmt.Sprintf("--log-level %q: want debug, info, warn or error", *level))
	}
	// One P: the relay is a chain of goroutine hand-offs (zmq4's reader →
	// socket queue → pump → writer), and on one P they are run-queue
	// switches instead of cross-thread wake-ups. Measured on 2 cores:
	// `pass` round trip 1.06–1.12× direct with GOMAXPROCS=1 against
	// 1.15–1.17× with 2, stream throughput no lower. GOMAXPROCS in the
	// environment still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("prog", "tfgpu-kernel")
	return wrapper.Run(context.Background(), wrapper.Config{
		ConnFile:       *conn,
		Argv:           argv,
		ShutdownGrace:  *grace,
		KillTimeout:    *killTimeout,
		InnerTransport: strings.ToLower(*inner),
		Cgroup:         *cg,
		StateDir:       *stateDir,
		MemoryLimit:    limit,
		NVMLLibrary:    *nvmlLib,
		ConfirmTimeout: *confirm,
		Log:            lg,
	})
}

// gpuSoname is NVML's soname, for the help text.
const gpuSoname = "libnvidia-ml.so.1"

func usageError(cmd, msg string) int {
	fmt.Fprintf(os.Stderr, "tfgpu-kernel %s: %s (see 'tfgpu-kernel %s --help')\n", cmd, msg, cmd)
	return 2
}
