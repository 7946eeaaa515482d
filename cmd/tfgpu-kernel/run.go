package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
	"github.com/tfgpu/tfgpu-kernel/wrapper"
	"golang.org/x/sys/unix"
)

// cmdRun is what the kernelspec's argv runs:
//
//	tfgpu-kernel run [flags] -f {connection_file} -- python -m ipykernel_launcher -f {connection_file}
func cmdRun(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	conn := fs.String("f", "", "the connection `FILE` Jupyter wrote (required)")
	var rf runFlags
	rf.define(fs) // shared with install, which writes them into kernelspecs
	standby := fs.Bool("standby", false, "internal: be the standby supervisor that a running one starts for its kernel's next restart (reads its leash on fd 3)")
	stateDir := fs.String("state-dir", record.DefaultDir(), "`DIR` where the kernel's state file goes (read by 'tfgpu-kernel ps' and 'stop')")
	example := "tfgpu-kernel run -f kernel-1.json -- /usr/bin/python3 -m ipykernel_launcher -f kernel-1.json"
	src, code, done := parseFlags(fs, args, example)
	if done {
		return code
	}
	argv := fs.Args()
	switch {
	case *conn == "":
		return usageError("run", "-f CONNECTION_FILE is required")
	case len(argv) == 0:
		return usageError("run", "no kernel command given after --")
	}
	v, err := rf.check(src)
	if err != nil {
		return usageError("run", err.Error())
	}
	// One P: the relay is a chain of goroutine hand-offs (zmq4's reader →
	// socket queue → pump), and on one P they are run-queue switches
	// instead of cross-thread wake-ups. Measured on 2 cores:
	// `pass` round trip 1.06–1.12× direct with GOMAXPROCS=1 against
	// 1.15–1.17× with 2, stream throughput no lower. GOMAXPROCS in the
	// environment still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	// Collect at three times the live heap, not twice: zmq4 reads every
	// frame from the kernel into a new buffer, and on a stream of 1 MB
	// frames the collections, and the pages given back and faulted in
	// again, were a quarter of the relay's CPU. Measured: 82.5–95 → 62.5 ms
	// per 100 MB, peak RSS 17.8 → 21.6 MB (docs/benchmarks.md#relay-cpu).
	// The heap's soft limit (wrapper.Run) still bounds a burst. GOGC in the
	// environment still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	// In a terminal (jupyter console, a kernel started by hand) the log
	// would be printed among the user's own lines: there only what is wrong
	// is said, unless a level was asked for. The server log (a file or a
	// pipe) gets every lifecycle line.
	levelSet := src["log-level"] != ""
	fs.Visit(func(f *flag.Flag) { levelSet = levelSet || f.Name == "log-level" })
	if !levelSet && isTerminal(os.Stderr) {
		v.level = slog.LevelWarn
	}
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: v.level})).With("prog", "tfgpu-kernel")
	var leash *os.File
	if *standby {
		leash = os.NewFile(3, "leash")
	}
	return wrapper.Run(context.Background(), wrapper.Config{
		Spare:          v.spare,
		Preload:        v.preload,
		SpareMaxAge:    rf.spareMaxAge,
		StandbyArgv:    standbyArgv(args),
		Standby:        *standby,
		Leash:          leash,
		ConnFile:       *conn,
		Argv:           argv,
		ShutdownGrace:  rf.grace,
		KillTimeout:    rf.killTimeout,
		InnerTransport: strings.ToLower(rf.inner),
		Cgroup:         rf.cg,
		StateDir:       *stateDir,
		MemoryLimit:    v.memLimit,
		GPUMemoryLimit: v.gpuLimit,
		NVMLLibrary:    rf.nvmlLib,
		ConfirmTimeout: rf.confirm,
		Limits:         zmtp.Limits{MaxMessage: v.maxMessage},
		Log:            lg,
	})
}

// standbyArgv is how a supervisor starts its standby (wrapper runs
// /proc/self/exe: this very binary, even should the file have been
// replaced since), with the same arguments; the environment is passed on
// as it is.
func standbyArgv(args []string) []string {
	self, err := os.Executable() // for ps; /proc/self/exe is what runs
	if err != nil {
		self = "tfgpu-kernel"
	}
	argv := []string{self, "run", "--standby"}
	for i, a := range args {
		if a == "--" {
			return append(argv, args[i:]...)
		}
		if a != "--standby" && a != "-standby" {
			argv = append(argv, a)
		}
	}
	return argv
}

// gpuSoname is NVML's soname, for the help text.
const gpuSoname = "libnvidia-ml.so.1"

func usageError(cmd, msg string) int {
	fmt.Fprintf(os.Stderr, "tfgpu-kernel %s: %s (see 'tfgpu-kernel %s --help')\n", cmd, msg, cmd)
	return 2
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
