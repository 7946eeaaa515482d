package wrapper

// A supervisor's side of the spare kernel (docs/design.md#spare-kernel):
// whether its kernel keeps one, the standby it starts once its kernel is
// ready, and what it tells the standby as it ends (standby.go is the
// standby itself, stub.go the launched process that a standby takes
// over).

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/wrapper/spare"
)

// standbyProc is a standby supervisor this supervisor started.
type standbyProc struct {
	pid    int
	leash  *os.File // the write end; closing it without "restart" ends the standby
	exited <-chan proc.ExitStatus
}

// checkSpare decides once whether this kernel keeps a spare (s.spareOff
// says why not) and logs it.
func (s *supervisor) checkSpare() {
	switch {
	case !s.cfg.Spare:
		s.spareOff = "turned off (--no-spare, TFGPU_SPARE=0)"
	case len(s.cfg.StandbyProgram) == 0:
		s.spareOff = "no standby program"
	}
	if s.spareOff == "" {
		if _, ok := spare.Parse(s.cfg.Argv); !ok {
			s.spareOff = "the kernel's command is not PYTHON -m ipykernel_launcher"
		}
	}
	if s.spareOff == "" {
		// A spare of this kernel held a GPU context: its imports
		// initialise CUDA, and every spare would.
		if sp := s.dir.ReadSpare(s.id); sp != nil && sp.GPU {
			s.spareOff = sp.Off
			s.log.Debug("no spare kernel", "why", s.spareOff)
			return
		}
	}
	if s.spareOff == "" && s.engine.Kind == engine.Container {
		if comm, ok := pid1Reaps(); !ok {
			s.spareOff = fmt.Sprintf("PID 1 of the container (%s) does not reap orphans: every restart would leave a zombie; run the container with --init", comm)
		}
	}
	if s.spareOff == "" {
		return
	}
	if s.cfg.Spare {
		s.log.Info("no spare kernel", "why", s.spareOff)
	}
}

// pid1Reaps reports whether PID 1 of this PID namespace is a program that
// waits for orphans: a standby that served a restart is re-parented to it
// and exits later. An interpreter or a server as PID 1 (a container run
// without --init) never does.
func pid1Reaps() (string, bool) {
	b, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		return "unknown", true
	}
	comm := strings.TrimSpace(string(b))
	for _, p := range []string{"python", "jupyter", "ipython", "node", "sleep", "bash", "sh"} {
		if comm == p || (len(p) > 2 && strings.HasPrefix(comm, p)) {
			return comm, false
		}
	}
	return comm, true
}

// startStandby starts the standby supervisor for this kernel's next
// restart, once the kernel is ready, and writes it run's arguments as the
// leash's first line (standby.go). Failures are logged; the kernel then
// restarts cold.
func (s *supervisor) startStandby() {
	if s.standby != nil || s.spareOff != "" {
		return
	}
	args, err := json.Marshal(s.cfg.StandbyArgs)
	if err != nil {
		s.log.Warn("cannot start the standby for a spare kernel", "err", err)
		return
	}
	// This very binary, whatever is at its path now; outside the kernel's
	// cgroup and tree.
	argv := append(slices.Clip(s.cfg.StandbyProgram), s.id)
	pid, exited, pw, err := s.startSessionChild("/proc/self/exe", argv, os.Environ(), 3)
	if err == nil {
		if _, err = pw.Write(append(args, '\n')); err != nil {
			pw.Close() // it ends as a standby whose supervisor is gone
		}
	}
	if err != nil {
		s.log.Warn("cannot start the standby for a spare kernel", "err", err)
		return
	}
	s.standby = &standbyProc{pid: pid, leash: pw, exited: exited}
	s.log.Debug("standby started", "pid", pid)
}

// standbyExited receives when the standby ended before it was needed.
func (s *supervisor) standbyExited() <-chan proc.ExitStatus {
	if s.standby == nil {
		return nil
	}
	return s.standby.exited
}

// standbyEnded notes the standby's end; one whose spare grew too old is
// replaced.
func (s *supervisor) standbyEnded(st proc.ExitStatus) {
	s.standby = nil
	if st.Code() == exitReplaceMe {
		s.startStandby()
		return
	}
	s.log.Debug("the standby ended", "code", st.Code())
}

// forgetSpareOff removes the record that this kernel keeps no spare as
// the kernel ends for good (not a restart: its next supervisors read it).
func (s *supervisor) forgetSpareOff() {
	if s.cfg.Standby && s.stub == nil {
		return // a standby that was not adopted: not the kernel's end
	}
	if !s.restarting {
		s.dir.RemoveSpare(s.id, 0)
	}
}

// endStandby tells the standby how this supervisor ends: for a restart
// it waits for the next supervisor (and this one does not wait for it to
// exit); otherwise it discards its spare and exits.
func (s *supervisor) endStandby(restart bool) {
	s.restarting = restart
	if s.standby == nil {
		return
	}
	if restart {
		if _, err := s.standby.leash.Write([]byte("restart\n")); err == nil {
			s.keepChild = s.standby.pid
		}
	}
	s.standby.leash.Close()
	s.standby = nil
}

// treeHoldsGPU names the GPU contexts the tree holds ("" when none, or
// when the GPU is not watched): a spare's, an import that initialised CUDA.
func (s *supervisor) treeHoldsGPU() string {
	hs, ok := s.gpu.holders()
	if !ok {
		return ""
	}
	pids, err := s.tree.Pids()
	if err != nil {
		pids = []int{s.kpid}
	}
	var held []string
	for _, h := range hs {
		if slices.Contains(pids, h.PID) {
			held = append(held, fmt.Sprintf("GPU%d pid %d", h.Device, h.PID))
		}
	}
	return strings.Join(held, ", ")
}

// discardConfirmed ends a spare that is not to be the kernel, kills what
// is left of its tree, and, should it have held a GPU context, waits for
// NVML to confirm its release, as for any tree.
func (s *supervisor) discardConfirmed(sp *spare.Spare) {
	old := s.gpu.watch(s.tree, s.kpid)
	sp.Discard()
	if _, _, err := s.killTree(); err != nil {
		s.log.Warn("cannot kill what the spare kernel left", "err", err)
	}
	s.gpu.confirm("spare discarded", old)
}
