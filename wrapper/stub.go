package wrapper

// The launched process that a standby takes over (docs/design.md#spare-kernel):
// with the spare on, a `run` that starts first asks the kernel's standby
// to take over its start (adopt). If it does, this process is the
// kernel's stub from then on: it forwards SIGINT, SIGTERM and SIGHUP to
// the supervisor (through a pidfd) and exits with the code the supervisor
// sends as its last act. The supervisor's side of it: the stub's end is
// its parent's (watchStub), and its exit code is the last thing it says
// (tellStub).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// answer writes one reply to c.
func answer(c *net.UnixConn, r adoptReply) error {
	b, _ := json.Marshal(r)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.Write(append(b, '\n'))
	return err
}

// watchStub closes stubGone when the launched process's connection ends:
// it exited or was killed, as the parent of a supervisor does. The stub is
// named in the kernel's record (describe), for Census.
func (s *supervisor) watchStub() {
	if cred, err := record.PeerCred(s.stub); err == nil {
		if start, err := startTime(int(cred.Pid)); err == nil {
			s.stubRef = &proc.Ref{PID: int(cred.Pid), Start: start}
		}
	}
	s.stubGone = make(chan struct{})
	go func(c *net.UnixConn, gone chan struct{}) {
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<10))
		close(gone)
	}(s.stub, s.stubGone)
}

// tellStub sends the launched process the exit code, last of all.
func (s *supervisor) tellStub() {
	if s.stub == nil {
		return
	}
	code := s.code
	answer(s.stub, adoptReply{Exit: &code})
	s.stub.Close()
}

// adopt is a launched supervisor's first step with the spare on: ask the
// kernel's standby to take over. true: it did, and the returned code is
// its supervision's, which this process (now a stub) exits with.
func (s *supervisor) adopt() (int, bool) {
	id := jmsg.KernelID(s.cfg.ConnFile)
	if !record.ValidKernelID(id) || s.cfg.StateDir == "" {
		return 0, false
	}
	log := s.cfg.Log.With("kernel", record.ShortID(id))
	d, err := record.OpenDir(s.cfg.StateDir, false, false)
	if err != nil {
		return 0, false
	}
	defer d.Close()
	c, err := d.DialUnix(record.StandbyName(id), time.Second)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			log.Debug("no standby to take over the kernel's start", "err", err)
		}
		return 0, false
	}
	defer c.Close()
	cred, err := record.PeerCred(c)
	if err != nil || int(cred.Uid) != os.Geteuid() || cred.Pid <= 0 {
		log.Warn("refused the standby socket: not a process of this user", "socket", d.Path()+"/"+record.StandbyName(id), "peer", fmt.Sprintf("%+v", cred))
		return 0, false
	}
	// Held by a pidfd from now on: its answer, later, proves the pid was
	// still the standby's when the pidfd was opened.
	pidfd, err := unix.PidfdOpen(int(cred.Pid), 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(pidfd)
	cwd, _ := os.Getwd()
	req, _ := json.Marshal(adoptRequest{ConnFile: s.cfg.ConnFile, Argv: s.cfg.Argv, Env: os.Environ(), Cwd: cwd})
	_ = c.SetDeadline(time.Now().Add(adoptTimeout))
	if _, err := c.Write(append(req, '\n')); err != nil {
		return 0, false
	}
	r := bufio.NewReader(io.LimitReader(c, 1<<16))
	var rep adoptReply
	line, err := r.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	if err != nil || !rep.OK {
		why := rep.Why
		if err != nil {
			why = err.Error()
		}
		log.Info("the standby did not take over; starting the kernel cold", "standby", cred.Pid, "why", why)
		c.Close()
		waitPidfd(pidfd, s.cfg.KillTimeout+time.Second) // its ports, should it have bound them, are free again
		return 0, false
	}
	_ = c.SetDeadline(time.Time{})
	log.Info("the kernel's standby supervisor took over; this process forwards signals to it", "supervisor", cred.Pid)
	return stubWait(r, pidfd, log), true
}

// stubWait is the stub's life: forward SIGINT, SIGTERM and SIGHUP to the
// supervisor that took over, end when it sends its exit code (or dies), or
// when this process's parent dies (the supervisor then sees the
// connection end).
func stubWait(r *bufio.Reader, pidfd int, log interface{ Warn(string, ...any) }) int {
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, parentDeathSignal)
	defer signal.Stop(sigc)
	defer watchParent()()
	codes := make(chan int, 1)
	go func() {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(codes)
				return
			}
			var rep adoptReply
			if json.Unmarshal(line, &rep) == nil && rep.Exit != nil {
				codes <- *rep.Exit
				return
			}
		}
	}()
	if parentGone() {
		return ExitFailed
	}
	for {
		select {
		case code, ok := <-codes:
			if !ok {
				log.Warn("the supervisor that took over ended without an exit code")
				return ExitFailed
			}
			return code
		case sig := <-sigc:
			if sig == parentDeathSignal {
				if parentGone() {
					return ExitOK
				}
				continue
			}
			if err := unix.PidfdSendSignal(pidfd, sig.(unix.Signal), nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				log.Warn("cannot forward a signal to the supervisor that took over", "signal", sig, "err", err)
			}
		}
	}
}

// waitPidfd waits until the process of pidfd exits, for at most d.
func waitPidfd(pidfd int, d time.Duration) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	_, _ = unix.Poll(fds, int(d/time.Millisecond))
}
