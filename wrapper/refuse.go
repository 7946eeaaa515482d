package wrapper

import (
	"context"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
	"github.com/tfgpu/tfgpu-kernel/wrapper/relay"
)

// A supervisor that refuses (docs/design.md#bad-settings): run's settings
// are bad (a TFGPU_ variable run does not know, a value it cannot take),
// and cmd/tfgpu-kernel has said so on stderr, once. Exiting with the error
// left it in the server log only: Jupyter's restarter started the kernel
// again, about six times, and JupyterLab then showed "No Kernel |
// Disconnected" with no word of why. So the supervisor binds the five ports
// as always and its relay answers as a parked kernel's does (wrapper/relay,
// refusing.go): kernel_info, so the client becomes ready; every cell with
// an error reply (TFGPUSettingsError) and the line on its stderr; a
// shutdown_request (Shut Down, Restart) with its reply, and then it exits
// 0, so a Restart starts a new run that refuses in its turn, and nothing
// loops. No kernel, no state directory, no cgroup, no GPU session, no
// watcher: nothing that could be left behind.

// SettingsErrorName is the ename of the error reply to a cell while the
// settings are refused.
const SettingsErrorName = "TFGPUSettingsError"

// refuse serves the clients until a shutdown_request, SIGTERM, SIGHUP or
// the loss of Jupyter, and returns the exit code.
func (s *supervisor) refuse(ctx context.Context) int {
	ci, curve, code, ok := s.loadConn()
	if !ok {
		return code
	}
	s.id = jmsg.KernelID(s.cfg.ConnFile)
	s.log = s.cfg.Log.With("kernel", record.ShortID(s.id))
	s.catchSignals(true)
	if parentGone() {
		s.log.Warn("the process that started the kernel is already gone; not starting")
		return ExitFailed
	}
	shared := zmtp.NewShared(s.cfg.Limits, s.log)
	if curve != nil {
		shared.UseCurve(curve)
	}
	var err error
	if s.outer, err = relay.Bind(ci, shared); err != nil {
		code, _ := s.usage("connection file %s: %v", s.cfg.ConnFile, err)
		return code
	}
	s.onExit(s.outer.Close)
	line := strings.TrimSpace(s.cfg.Refusal)
	s.relay = relay.NewRefusing(ctx, s.outer, s.signer, s.events, relay.Refusal{
		Ename:  SettingsErrorName,
		Evalue: line,
		Text: "tfgpu-kernel: " + line + "\nNo kernel was started. Fix the setting where it is set, in the kernelspec or " +
			"the environment the Jupyter server was started with, and restart the kernel (or the server, for its environment).\n",
	}, s.log)
	s.relay.SetKernelID(s.id)
	s.onExit(s.relay.CloseInner)
	s.log.Debug("refusing: no kernel is started; every cell is told why", "why", line)
	for {
		select {
		case ev := <-s.events:
			if ev.Kind != relay.ShutdownRequest {
				continue // only a shutdown_request comes without a kernel
			}
			s.relay.ReplyShutdown(ev)
			s.relay.BroadcastShutdown(s.id, ev)
			s.outer.Drain(drainAfterStop)
			return ExitOK
		case sig := <-s.sigc:
			switch sig {
			case unix.SIGTERM, unix.SIGHUP:
				return ExitOK
			case parentDeathSignal:
				if parentGone() {
					return ExitOK
				}
			}
			// SIGINT (an interrupt, and before every shutdown and
			// restart) and SIGUSR1 (a stop order): there is nothing to
			// interrupt or stop.
		case <-ctx.Done():
			return ExitOK
		}
	}
}
