// Package wrapper is the supervisor behind `tfgpu-kernel run`
// (docs/design.md#lifecycle): it binds the five sockets Jupyter asked for,
// starts the real kernel on a private inner connection in a tree of its
// own, relays every channel (wrapper/relay), and owns the kernel's
// lifecycle and the GPU policy.
//
// Contract:
//   - Run is prepare (run.go: what can fail on bad input) → start (finish
//     what dead supervisors left, containment, watcher, GPU baseline,
//     spawn) → loop (lifecycle.go). The phase goes starting → running →
//     stopping → stopped; only the loop and the stop path change it, and
//     each change is recorded in the kernel's state file.
//   - Every way the kernel ends (shutdown, restart, SIGTERM/SIGHUP, the
//     server's death, the kernel's own death) goes through one ordered
//     stop path (stop.go); how they differ is the cause it is given.
//   - GPU policy (gpu.go): a baseline before spawn, what the tree holds
//     just before the kill, confirmation through NVML after it; a restart
//     hands the confirmation to the next supervisor. Without NVML the
//     session is gpu.Off and nothing is checked.
//   - SIGINT is forwarded to the kernel's process group and never ends the
//     supervisor.
//   - The process is a child subreaper with one reaper (proc.Reaper):
//     code here must not call exec.Cmd.Wait or os.Process.Wait.
//   - A watcher process (watcher.go) finishes the kernel should the
//     supervisor be SIGKILLed.
//   - Given a Config.Refusal (run's settings are bad), Run starts no
//     kernel and nothing else that could be left behind: it binds the five
//     ports and answers every cell with the refusal until a shutdown_request
//     (refuse.go).
package wrapper
