package main

import (
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// runFlags are the `run` flags a kernelspec may carry. `run` and `install`
// define and check them with the same code, so `install` refuses exactly the
// values `run` would refuse at every kernel start.
type runFlags struct {
	level, inner, memLimit, gpuLimit, cg, nvmlLib, maxMsg string
	grace, killTimeout, confirm                           time.Duration
}

// runValues are runFlags checked and parsed.
type runValues struct {
	memLimit   int64 // bytes; 0: no limit
	gpuLimit   int64 // bytes of GPU memory; 0: no limit
	level      slog.Level
	maxMessage int64 // bytes
}

// kernelspecRunFlags are the names of runFlags, in the order `install`
// writes them into a kernelspec's argv (a fixed order keeps kernel.json
// stable whatever order they were typed in).
var kernelspecRunFlags = []string{
	"cgroup", "memory-limit", "gpu-memory-limit", "confirm-timeout", "shutdown-grace",
	"kill-timeout", "inner-transport", "nvml-library", "max-message-size", "log-level",
}

// define adds the flags to fs with run's defaults and help.
func (r *runFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&r.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.DurationVar(&r.grace, "shutdown-grace", wrapper.DefaultShutdownGrace, "how long the kernel may take to exit by itself after shutdown_request")
	fs.DurationVar(&r.killTimeout, "kill-timeout", wrapper.DefaultKillTimeout, "how long killing the kernel's tree may take")
	fs.StringVar(&r.inner, "inner-transport", "auto", "transport to the kernel: auto (ipc, else tcp), ipc, tcp")
	fs.StringVar(&r.memLimit, "memory-limit", "", "memory the kernel's whole tree may use, e.g. 8G (powers of 1024); empty: no limit")
	fs.StringVar(&r.gpuLimit, "gpu-memory-limit", "", "GPU memory the kernel's whole tree may hold, summed over the watched GPUs, e.g. 8G; over it the tree is killed and Jupyter restarts the kernel; empty: no limit")
	fs.StringVar(&r.cg, "cgroup", cgroup.Auto, "containment: auto (first of v2, systemd, v1 that works, else none), v2, systemd (user scope via systemd-run), v1 (freezer), none (process group and /proc)")
	fs.StringVar(&r.nvmlLib, "nvml-library", "", "NVML library file to load; empty: "+gpuSoname+" through the dynamic loader (LD_LIBRARY_PATH)")
	fs.DurationVar(&r.confirm, "confirm-timeout", wrapper.DefaultConfirmTimeout, "how long to wait for NVML to list none of a killed tree's GPU contexts")
	fs.StringVar(&r.maxMsg, "max-message-size", "1G", "the largest message a client may send the kernel (all its frames, e.g. a comm's buffers); a client that sends a larger one is disconnected")
}

// check validates the values and parses the sizes and the log level. The
// error is one line naming the flag.
func (r *runFlags) check() (v runValues, err error) {
	switch {
	case !slices.Contains(cgroup.Choices, r.cg):
		return v, fmt.Errorf("--cgroup %q: want auto, v2, systemd, v1 or none", r.cg)
	case r.confirm <= 0:
		return v, fmt.Errorf("--confirm-timeout %v: want a positive duration such as 10s", r.confirm)
	case r.inner != "auto" && r.inner != "ipc" && r.inner != "tcp":
		return v, fmt.Errorf("--inner-transport %q: want auto, ipc or tcp", r.inner)
	}
	if r.memLimit != "" {
		if v.memLimit, err = cgroup.ParseSize(r.memLimit); err != nil || v.memLimit <= 0 {
			return v, fmt.Errorf("--memory-limit %q: want a size such as 8G or 300M", r.memLimit)
		}
	}
	if r.gpuLimit != "" {
		if v.gpuLimit, err = cgroup.ParseSize(r.gpuLimit); err != nil || v.gpuLimit <= 0 {
			return v, fmt.Errorf("--gpu-memory-limit %q: want a size such as 8G or 300M", r.gpuLimit)
		}
	}
	v.maxMessage = zmtp.DefaultMaxMessage
	if r.maxMsg != "" {
		// Below 1 MiB even kernel_info and execute requests of long cells
		// would be refused.
		if v.maxMessage, err = cgroup.ParseSize(r.maxMsg); err != nil || v.maxMessage < 1<<20 {
			return v, fmt.Errorf("--max-message-size %q: want a size of at least 1M, such as 2G", r.maxMsg)
		}
	}
	if err := v.level.UnmarshalText([]byte(r.level)); err != nil {
		return v, fmt.Errorf("--log-level %q: want debug, info, warn or error", r.level)
	}
	return v, nil
}
