package runflags

import (
	"flag"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/place"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
	"github.com/tfgpu/tfgpu-kernel/wrapper"
)

// Flags are the `run` flags a kernelspec may carry. `run` and `install`
// define and check them with the same code, so `install` refuses exactly the
// values `run` would refuse at every kernel start.
type Flags struct {
	level, inner, memLimit, gpuLimit, cg, nvmlLib, maxMsg, gpus string
	grace, killTimeout, confirm, spareMaxAge                    time.Duration
	spare, noSpare, oomDetails                                  bool
	preload                                                     string
}

// Values are Flags checked and parsed.
type Values struct {
	memLimit   int64 // bytes; 0: no limit
	gpuLimit   int64 // bytes of GPU memory; 0: no limit
	level      slog.Level
	maxMessage int64    // bytes
	spare      bool     // keep a spare kernel for restarts
	preload    []string // modules the spare imports
	gpus       *place.Spec
}

// KernelspecFlags are the names of Flags, in the order `install`
// writes them into a kernelspec's argv (a fixed order keeps kernel.json
// stable whatever order they were typed in).
var KernelspecFlags = []string{
	"cgroup", "memory-limit", "gpu-memory-limit", "confirm-timeout", "shutdown-grace",
	"kill-timeout", "inner-transport", "nvml-library", "max-message-size", "log-level",
	"spare", "no-spare", "preload", "spare-max-age", "oom-details", "gpus",
}

// define adds the flags to fs with run's defaults and help.
func (r *Flags) Define(fs *flag.FlagSet) {
	fs.StringVar(&r.level, "log-level", "info", "`LEVEL`: debug, info, warn, error")
	DurationVar(fs, &r.grace, "shutdown-grace", wrapper.DefaultShutdownGrace, "how long the kernel may take to exit by itself after shutdown_request")
	DurationVar(fs, &r.killTimeout, "kill-timeout", wrapper.DefaultKillTimeout, "how long killing the kernel's tree may take")
	fs.StringVar(&r.inner, "inner-transport", "auto", "`TRANSPORT` to the kernel: auto (ipc, else tcp), ipc, tcp")
	fs.StringVar(&r.memLimit, "memory-limit", "", "`SIZE` of memory the kernel's whole tree may use, e.g. 8G (powers of 1024; at least 128M); empty: no limit")
	fs.StringVar(&r.gpuLimit, "gpu-memory-limit", "", "`SIZE` of GPU memory the kernel's whole tree may hold, summed over the watched GPUs, e.g. 8G (at least 128M); over it the tree is killed and Jupyter restarts the kernel; empty: no limit")
	fs.StringVar(&r.cg, "cgroup", cgroup.Auto, "`MODE` of containment: auto (first of v2, systemd, v1 that works, else proc), v2, systemd (user scope via systemd-run), v1 (freezer), proc (process group and /proc; its old name none is taken too); inside a Slurm job always proc")
	fs.StringVar(&r.nvmlLib, "nvml-library", "", "NVML library `FILE` to load; empty: "+GPUSoname+" through the dynamic loader (LD_LIBRARY_PATH)")
	DurationVar(fs, &r.confirm, "confirm-timeout", wrapper.DefaultConfirmTimeout, "how long to wait for NVML to list none of a killed tree's GPU contexts")
	fs.BoolVar(&r.spare, "spare", true, "keep a spare kernel, its imports done, for the next restart (docs/design.md#spare-kernel); TFGPU_SPARE=0 turns it off")
	fs.BoolVar(&r.noSpare, "no-spare", false, "no spare kernel: every restart starts Python cold (same as --spare=false)")
	fs.StringVar(&r.preload, "preload", "", "`MODULES` the spare kernel imports before it is needed, comma-separated, e.g. numpy,tensorflow (a module that initialises CUDA on import makes the spare useless)")
	DurationVar(fs, &r.spareMaxAge, "spare-max-age", wrapper.DefaultSpareMaxAge, "how long a spare kernel waits before it is replaced by a fresh one (what it imported may have changed on disk)")
	fs.BoolVar(&r.oomDetails, "oom-details", false, "when a cell runs out of GPU memory, name other users' processes holding it by pid and command too, not by user only (what /proc shows the kernel's user either way)")
	fs.StringVar(&r.gpus, "gpus", "", "`auto[:N][,min-free=SIZE]`: at every start and restart, give the kernel the N GPUs (or MIG instances) with the most free memory, by UUID in CUDA_VISIBLE_DEVICES, e.g. auto:2,min-free=20G; a CUDA_VISIBLE_DEVICES already set wins; empty: the kernel sees every GPU")
	fs.StringVar(&r.maxMsg, "max-message-size", "1G", "the largest message (`SIZE`) a client may send the kernel (all its frames, e.g. a comm's buffers); a client that sends a larger one is disconnected")
}

// MinMemoryLimit is the smallest --memory-limit and --gpu-memory-limit
// taken. Below it no kernel could start: ipykernel alone is about 70 MiB
// resident once started (Debian's 6.17 on Python 3.11, VmHWM), and the
// OOM killer would end it before kernel_info, which Jupyter reports only
// as "Kernel died before replying to kernel_info"; a CUDA context alone
// holds a few hundred MiB of GPU memory.
const MinMemoryLimit = 128 << 20

// check validates the values and parses the sizes and the log level. The
// error is one line naming the setting as the user gave it (src: the
// flag, or the TFGPU_ variable that set it) and showing a valid value.
func (r *Flags) Check(src Source) (v Values, err error) {
	n := src.Name
	switch {
	case !validChoice(r.cg):
		return v, fmt.Errorf("%s %q: want auto, v2, systemd, v1 or proc", n("cgroup"), r.cg)
	case r.confirm <= 0:
		return v, fmt.Errorf("%s %v: want a positive duration such as 10s", n("confirm-timeout"), r.confirm)
	case r.killTimeout <= 0:
		return v, fmt.Errorf("%s %v: want a positive duration such as 1.2s", n("kill-timeout"), r.killTimeout)
	case r.spareMaxAge < time.Second:
		return v, fmt.Errorf("%s %v: want a duration of at least 1s, such as 6h", n("spare-max-age"), r.spareMaxAge)
	case r.grace < 0:
		return v, fmt.Errorf("%s %v: want a duration of 0 or more, such as 1s", n("shutdown-grace"), r.grace)
	case r.inner != "auto" && r.inner != "ipc" && r.inner != "tcp":
		return v, fmt.Errorf("%s %q: want auto, ipc or tcp", n("inner-transport"), r.inner)
	}
	if v.memLimit, err = checkLimit(n("memory-limit"), r.memLimit, "ipykernel alone needs about 70 MiB to start"); err != nil {
		return v, err
	}
	if v.gpuLimit, err = checkLimit(n("gpu-memory-limit"), r.gpuLimit, "a CUDA context alone holds a few hundred MiB"); err != nil {
		return v, err
	}
	v.maxMessage = zmtp.DefaultMaxMessage
	if r.maxMsg != "" {
		// Below 1 MiB even kernel_info and execute requests of long cells
		// would be refused.
		if v.maxMessage, err = bytesize.Parse(r.maxMsg); err != nil || v.maxMessage < 1<<20 {
			return v, fmt.Errorf("%s %q: want a size of at least 1M, such as 2G", n("max-message-size"), r.maxMsg)
		}
	}
	v.spare = r.spare && !r.noSpare
	if r.preload != "" {
		for _, m := range strings.Split(r.preload, ",") {
			if !moduleName.MatchString(m) {
				return v, fmt.Errorf("%s %q: %q is not a Python module name; want names such as numpy,tensorflow", n("preload"), r.preload, m)
			}
			v.preload = append(v.preload, m)
		}
		if len(v.preload) > 64 {
			return v, fmt.Errorf("%s: %d modules; at most 64", n("preload"), len(v.preload))
		}
	}
	if spec, on, err := place.Parse(r.gpus); err != nil {
		return v, fmt.Errorf("%s %q: %v", n("gpus"), r.gpus, err)
	} else if on {
		v.gpus = &spec
	}
	if err := v.level.UnmarshalText([]byte(r.level)); err != nil {
		return v, fmt.Errorf("%s %q: want debug, info, warn or error", n("log-level"), r.level)
	}
	return v, nil
}

// moduleName is a dotted Python module name.
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// validChoice reports whether --cgroup takes c (cgroup.Choice).
func validChoice(c string) bool {
	_, ok := cgroup.Choice(c)
	return ok
}

// checkLimit parses a memory limit given as name ("" is none): a size of
// at least MinMemoryLimit, the reason for which is why.
func checkLimit(name, s, why string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	b, err := bytesize.Parse(s)
	switch {
	case err != nil || b <= 0:
		return 0, fmt.Errorf("%s %q: want a size such as 8G or 300M", name, s)
	case b < MinMemoryLimit:
		return 0, fmt.Errorf("%s %q: too small for any kernel (%s); want at least %dM, such as 8G",
			name, s, why, MinMemoryLimit>>20)
	}
	return b, nil
}
