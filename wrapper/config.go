package wrapper

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/place"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

// Exit codes of Run, beyond the kernel's own (see Run).
const (
	ExitOK     = 0
	ExitUsage  = 2   // bad connection file, port in use, bad flags
	ExitExec   = 126 // the kernel could not be executed
	ExitNoExec = 127 // the kernel's program was not found
	ExitFailed = 1   // anything else that kept the kernel from running
)

// Defaults fit jupyter_client's budget: it SIGTERMs the supervisor 2.5 s
// after shutdown_request (half of shutdown_wait_time), so grace + kill +
// reply must end well before (docs/design.md#lifecycle).
const (
	DefaultShutdownGrace = time.Second
	DefaultKillTimeout   = 1200 * time.Millisecond
	// DefaultConfirmTimeout bounds the wait for NVML to stop listing a
	// dead tree's contexts: driver teardown of a large context takes a
	// second or two; a restart still finishes well inside jupyter_client's
	// 60 s kernel_info timeout when it runs out.
	DefaultConfirmTimeout = 10 * time.Second
)

// Config is what `tfgpu-kernel run` was asked to do. Zero fields take
// the defaults (withDefaults).
type Config struct {
	ConnFile       string        // the connection file Jupyter wrote
	Argv           []string      // the kernel's argv; ConnFile in it is replaced
	ShutdownGrace  time.Duration // how long the kernel may take to exit after shutdown_request
	KillTimeout    time.Duration // how long killing the tree may take
	InnerTransport string        // "auto" (ipc, else tcp), "ipc" or "tcp"
	Cgroup         string        // containment: one of cgroup.Choices; "": cgroup.Auto
	StateDir       string        // where state files go; "": record.DefaultDir()
	MemoryLimit    int64         // bytes the kernel's tree may use; 0: no limit
	GPUMemoryLimit int64         // bytes of GPU memory the tree may hold (all watched devices); 0: no limit
	OOMDetails     bool          // a GPU out-of-memory explanation names other users' pids and commands (oom.View.Details)
	GPUs           *place.Spec   // --gpus auto: the GPUs with the most free memory, at every start (place.go); nil: off
	NVMLLibrary    string        // NVML to load; "": libnvidia-ml.so.1 through the dynamic loader
	ConfirmTimeout time.Duration // how long to wait for NVML to release a dead tree's GPU memory
	Limits         zmtp.Limits   // what a client's connection may make the supervisor hold; zero: defaults
	Log            *slog.Logger
	Stderr         io.Writer // where one-line usage errors go

	// Refusal, when not empty, is why run's settings are unusable, in one
	// line: no kernel is started, and every request that needs one is
	// answered with it (refuse.go). Only ConnFile, Log and Stderr are
	// read then.
	Refusal string

	// The spare kernel (docs/design.md#spare-kernel): with Spare, a
	// supervisor whose kernel is ready starts a standby supervisor
	// (StandbyProgram and the kernel id: this program's hidden `standby`
	// role, handed StandbyArgs, run's own arguments, on its leash), which
	// keeps a spare kernel for the next restart; and a supervisor that
	// starts looks for such a standby of its kernel first.
	Spare          bool
	Preload        []string      // modules the spare imports besides ipykernel
	SpareMaxAge    time.Duration // a spare older than this is replaced; 0: DefaultSpareMaxAge
	StandbyProgram []string      // how to start a standby, but for the kernel id; nil: no spare
	StandbyArgs    []string      // the standby's run arguments
	Standby        bool          // this process is a standby (tfgpu-kernel standby)
	Leash          *os.File      // a standby's: the pipe from the supervisor it stands by for

	v2opts []cgroup.V2Option // tests force the cgroup.procs fallback with these
	shared *zmtp.Shared      // tests read the relay's counters through it
	engine *engine.Engine    // tests say what the supervisor runs inside; nil: engine.Detect
}

// withDefaults is c with every zero field set to its default: the one
// place defaults are applied.
func (c Config) withDefaults() Config {
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.KillTimeout <= 0 {
		c.KillTimeout = DefaultKillTimeout
	}
	if c.ConfirmTimeout <= 0 {
		c.ConfirmTimeout = DefaultConfirmTimeout
	}
	if c.SpareMaxAge <= 0 {
		c.SpareMaxAge = DefaultSpareMaxAge
	}
	if c.Cgroup == "" {
		c.Cgroup = cgroup.Auto
	}
	if c.StateDir == "" {
		c.StateDir = record.DefaultDir()
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(c.Stderr, nil))
	}
	return c
}
