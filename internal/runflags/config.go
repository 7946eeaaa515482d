package runflags

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
	"github.com/tfgpu/tfgpu-kernel/kernelspec"
	"github.com/tfgpu/tfgpu-kernel/wrapper"
	"golang.org/x/sys/unix"
)

// Config parses run's arguments into the supervisor's Config; ok is
// false after a usage error, said on stderr, with the exit code.
func Config(name string, args []string) (wrapper.Config, int, bool) {
	given := args
	args, settingsErr := withSettings(args)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	conn := fs.String("f", "", "the connection `FILE` Jupyter wrote (required)")
	var rf Flags
	rf.Define(fs) // shared with install, which writes them into kernelspecs
	stateDir := fs.String("state-dir", record.DefaultDir(), "`DIR` where the kernel's state file goes (read by 'tfgpu-kernel ps' and 'stop')")
	example := "tfgpu-kernel run -f kernel-1.json -- /usr/bin/python3 -m ipykernel_launcher -f kernel-1.json"
	src, help, bad := Parse(fs, args)
	if bad == nil && settingsErr != nil {
		bad = settingsErr
	}
	if help {
		PrintUsage(os.Stdout, fs, example)
		return wrapper.Config{}, 0, false
	}
	argv := fs.Args()
	var v Values
	if bad == nil {
		switch {
		case *conn == "":
			return wrapper.Config{}, UsageError("run", "-f CONNECTION_FILE is required"), false
		case len(argv) == 0:
			return wrapper.Config{}, UsageError("run", "no kernel command given after --"), false
		}
		// A TFGPU_ variable run does not read is a typo that would be ignored.
		if bad = CheckEnv(os.Environ()); bad == nil {
			v, bad = rf.Check(src)
		}
	}
	if bad != nil {
		return refusingConfig(args, *conn, bad)
	}
	// One P: the relay is a chain of goroutine hand-offs (a door's reader →
	// Recv → pump; zmq4's reader → socket queue → pump from the kernel),
	// and on one P they are run-queue switches instead of cross-thread
	// wake-ups. Measured on 2 cores: `pass` round trip 1.06–1.12× direct
	// with GOMAXPROCS=1 against 1.15–1.17× with 2, stream throughput no
	// lower; after the doors left zmq4 (issue 35), this and GOGC=200 off
	// together cost 2.3× the relay CPU per 100 MB and 1.5× per 10 000
	// display_data (docs/benchmarks.md#doors-without-zmq4). GOMAXPROCS in
	// the environment still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	// Collect at three times the live heap, not twice: zmq4 reads every
	// frame from the kernel into a new buffer (and a door every frame from
	// a client), and on a stream of 1 MB frames the collections, and the
	// pages given back and faulted in again, were a quarter of the relay's
	// CPU. Measured: 82.5–95 → 62.5 ms
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
	lg := stderrLog(v.level)
	return wrapper.Config{
		Spare:          v.spare,
		Preload:        v.preload,
		SpareMaxAge:    rf.spareMaxAge,
		StandbyProgram: standbyProgram(),
		StandbyArgs:    given, // its settings file read again, as the next start reads it
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
		OOMDetails:     rf.oomDetails,
		GPUs:           v.gpus,
		Limits:         zmtp.Limits{MaxMessage: v.maxMessage},
		Log:            lg,
	}, 0, true
}

// refusingConfig is run's answer to settings it cannot take (bad, the one
// line that says why; docs/design.md#bad-settings): the line goes to
// stderr, the server log, once, as it always did; then, if the connection
// file is usable, the Config of a supervisor that starts no kernel and
// answers every cell with the line, so that the user sees it in the
// notebook; else exit 2, as before. conn is -f as parsed ("" when the
// flags did not parse as far: connArg finds it).
func refusingConfig(args []string, conn string, bad error) (wrapper.Config, int, bool) {
	code := UsageError("run", bad.Error())
	if conn == "" {
		conn = connArg(args)
	}
	if conn == "" || wrapper.CheckConnFile(conn) != nil {
		return wrapper.Config{}, code, false
	}
	level := slog.LevelInfo
	if isTerminal(os.Stderr) {
		level = slog.LevelWarn
	}
	return wrapper.Config{ConnFile: conn, Refusal: bad.Error(), Log: stderrLog(level), Stderr: os.Stderr}, 0, true
}

// connArg is the value of -f in run's args, before "--", for when the
// flag package stopped at an error before it (an unknown flag: a
// kernelspec written for another version of this program).
func connArg(args []string) string {
	for i, a := range args {
		switch {
		case a == "--":
			return ""
		case (a == "-f" || a == "--f") && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "-f="), strings.HasPrefix(a, "--f="):
			_, v, _ := strings.Cut(a, "=")
			return v
		}
	}
	return ""
}

// stderrLog is the supervisor's log: slog text lines on stderr, which
// Jupyter puts in the server log.
func stderrLog(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("prog", "tfgpu-kernel")
}

// standbyProgram is how a supervisor starts its standby: wrapper runs
// /proc/self/exe (this very binary, even should the file have been
// replaced since) with this argv and the kernel id; the environment is
// passed on as it is.
func standbyProgram() []string {
	self, err := os.Executable() // for ps; /proc/self/exe is what runs
	if err != nil {
		self = "tfgpu-kernel"
	}
	return []string{self, "standby"}
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// withSettings expands `--settings FILE`, which only the wheel's launcher
// gives, as run's first flag (docs/design.md#the-wheel): the file's run
// flags go first, as a kernelspec's argv carries them (a flag after them
// wins, and either wins over its TFGPU_ variable), and its env is set for
// the supervisor and the kernel, as a kernelspec's env is. A file that is
// gone since the launcher looked means the defaults. An error is the one
// line run's refusal says in the notebook.
func withSettings(args []string) ([]string, error) {
	if len(args) == 0 || args[0] != "--settings" && !strings.HasPrefix(args[0], "--settings=") {
		return args, nil
	}
	path, rest := strings.TrimPrefix(args[0], "--settings="), args[1:]
	if args[0] == "--settings" {
		if len(args) < 2 {
			return args[1:], errors.New("--settings needs the settings file's path")
		}
		path, rest = args[1], args[2:]
	}
	if !filepath.IsAbs(path) {
		return rest, fmt.Errorf("--settings %q: want an absolute path", path)
	}
	set, err := kernelspec.ReadSettings(path)
	if err != nil || set == nil {
		return rest, err
	}
	pairs, _ := kernelspec.RunFlagPairs(set.RunFlags) // ReadSettings checked them
	for _, p := range pairs {
		if !slices.Contains(KernelspecFlags, strings.TrimPrefix(p[0], "--")) {
			return rest, fmt.Errorf("%s: %s is no run flag a kernelspec may carry; fix it with 'tfgpu-kernel install'", path, p[0])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set.Env)) {
		os.Setenv(k, set.Env[k])
	}
	return append(slices.Clone(set.RunFlags), rest...), nil
}

// GPUSoname is NVML's soname, for the help text.
const GPUSoname = "libnvidia-ml.so.1"

// UsageError says a usage error of cmd, one line on stderr with a pointer
// to its --help, and returns its exit code, 2.
func UsageError(cmd, msg string) int {
	fmt.Fprintf(os.Stderr, "tfgpu-kernel %s: %s (see 'tfgpu-kernel %s --help')\n", cmd, msg, cmd)
	return 2
}
