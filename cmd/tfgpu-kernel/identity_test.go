//go:build linux

package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// Issue 32, item 8: one kernel, however many processes. With the spare
// kernel a kernel is, over its life, the process Jupyter launched, its
// supervisor and watcher, a standby with its own watcher and spare, and
// after a restart a stub whose supervisor is the standby that took over.
// For every state a kernel goes through, root's and its owner's ps must
// list it once, as its owner's, in its state, with its supervisor in its
// role and nothing of it called escaped or counted twice; doctor must be
// green and call nothing of it stale; stop and start must reach it
// (identity_check_test.go). Real users (kernelowner_test.go), each
// stack (Debian's only in the quick suite), the spare on and off (on
// only in the quick suite: identitySpareModes).

// TestKernelIdentityAcrossStates walks a kernel of a real user's through
// its states (walkKernelStates). Its kernelspec sets --memory-limit, so
// each supervisor and standby makes a v1 memory cgroup besides its tree's
// cgroup: more for doctor to know as the kernel's.
func TestKernelIdentityAcrossStates(t *testing.T) {
	bin := sharedBinary(t)
	eachStack(t, func(t *testing.T, stack string) {
		py := usersStackPython(t, stack)
		for _, spare := range identitySpareModes {
			name, flags := "spare", []string{"--memory-limit", "2G"}
			if !spare {
				name, flags = "no-spare", append(flags, "--no-spare")
			}
			t.Run(name, func(t *testing.T) {
				start := time.Now()
				walkKernelStates(t, newKernelOwner(t, bin, "owner", py, flags...), spare)
				t.Logf("walked in %v", time.Since(start).Round(time.Millisecond))
			})
		}
	})
}

// kernelWalk is where a kernel is on its walk through its states.
type kernelWalk struct {
	o        *kernelOwner
	d        *stateDriver
	id       string
	spare    bool
	want     identityWant
	restarts int // since the last cold start: the generations of adopted spares
}

// walkKernelStates takes one kernel of o's through every state: starting,
// running, its spare waiting, adopted after one restart and after three
// (cold restarts without the spare), held and started again by root and
// by the owner, parked by each, crashed and restarted by Jupyter, its
// supervisor SIGKILLed and restarted; the property is checked at each.
func walkKernelStates(t *testing.T, o *kernelOwner, spare bool) {
	w := &kernelWalk{o: o, id: newKernelID(t), spare: spare}
	w.d = o.startDriver(t, w.id)
	w.want.noSpare = !spare

	a := w.d.do(t, "start gated")
	for i := 0; a.Phase != record.PhaseStarting || a.Supervisor == 0; i++ {
		if i == 600 {
			t.Fatalf("the kernel's record never said starting: %+v\n%s", a, w.d.kernelLog())
		}
		time.Sleep(50 * time.Millisecond)
		a = w.d.do(t, "info")
	}
	w.want.state, w.want.supervisor, w.want.kernel = record.PhaseStarting, a.Launched, a.Kernel
	w.check(t, "starting")
	w.d.do(t, "open-gate")
	w.d.do(t, "ready")
	if k := w.d.do(t, "kernel-pid").Kernel; w.want.kernel != 0 && k != w.want.kernel {
		t.Errorf("the kernel that answers is %d, not %d, which was starting", k, w.want.kernel)
	} else {
		w.want.kernel = k
	}
	w.want.state = record.PhaseRunning
	w.waitSpare(t, "running")

	label := o.name + ":" + w.id
	parked := "stopped kernel " + label + ": parked by its supervisor, which keeps its place (the next cell starts a fresh kernel)"
	w.restart(t, "restart")
	w.hold(t, "root")
	w.restart(t, "restart")
	w.restart(t, "restart")
	w.hold(t, "owner")
	w.restart(t, "crash")
	w.stop(t, "root", "stop", parked)
	w.freshKernel(t, "a cell after root's stop")
	w.stop(t, "owner", "stop", parked)
	w.freshKernel(t, "a cell after the owner's stop")
	w.restart(t, "kill-supervisor")

	w.d.do(t, "shutdown")
	for _, root := range []bool{true, false} {
		rows, _ := o.ps(t, root)
		if slices.ContainsFunc(rows, func(r psRow) bool { return r.KernelID == w.id }) {
			t.Errorf("ps (asRoot %v) lists the kernel after its shutdown", root)
		}
	}
}

// check checks the property at the walk's state.
func (w *kernelWalk) check(t *testing.T, step string) {
	t.Helper()
	w.o.check(t, step, w.id, w.want)
}

// waitSpare: with the spare on, the kernel's next spare is waiting (the
// state is checked then, with it); without, the state is checked.
func (w *kernelWalk) waitSpare(t *testing.T, step string) {
	t.Helper()
	w.want.spare = [2]int{}
	if w.spare {
		a := w.d.do(t, "wait-spare")
		w.want.spare = [2]int{a.Spare.PID, a.Spare.StandbyPID}
		step += ", its spare waiting"
	}
	w.check(t, step)
}

// freshKernel: the kernel answers a cell; a parked one's runs in a fresh
// kernel of the same supervisor.
func (w *kernelWalk) freshKernel(t *testing.T, step string) {
	t.Helper()
	old := w.want.kernel
	w.want.kernel = w.d.do(t, "kernel-pid").Kernel
	if w.want.kernel == old {
		t.Errorf("%s: the cell ran in the kernel %d that was stopped", step, old)
	}
	w.want.state, w.want.hold = record.PhaseRunning, false
	w.waitSpare(t, step)
}

// restart restarts the kernel (how: restart, crash, kill-supervisor) and
// checks it. With the spare on (but after its supervisor's SIGKILL: its
// standby leaves with it) the spare became the kernel, its standby the
// supervisor and the launched process its stub.
func (w *kernelWalk) restart(t *testing.T, how string) {
	t.Helper()
	was := w.want
	a := w.d.do(t, how)
	w.want.state, w.want.hold = record.PhaseRunning, false
	w.want.supervisor, w.want.stub, w.want.kernel = a.Launched, 0, 0
	w.restarts++
	step := map[string]string{"restart": "restarted", "crash": "crashed and restarted by Jupyter",
		"kill-supervisor": "its supervisor SIGKILLed and restarted by Jupyter"}[how]
	switch {
	case !w.spare:
		step += fmt.Sprintf(" cold (%d)", w.restarts)
	case how == "kill-supervisor":
		w.restarts = 0
		step += " cold"
	default:
		w.want.supervisor, w.want.stub, w.want.kernel = was.spare[1], a.Launched, was.spare[0]
		step += fmt.Sprintf(", its spare adopted (%d in a row)", w.restarts)
	}
	if k := w.d.do(t, "kernel-pid").Kernel; w.want.kernel != 0 && k != w.want.kernel {
		t.Errorf("%s: the kernel is %d, not the spare %d", step, k, w.want.kernel)
	} else {
		w.want.kernel = k
	}
	if how == "kill-supervisor" { // its standby and spare leave with it
		w.gone(t, step+": the SIGKILLed supervisor's standby and spare", a.Killed, was.spare[0], was.spare[1])
	}
	w.waitSpare(t, step)
}

// hold: who (root or the owner) holds the kernel down (stop --hold),
// then lifts the hold (start); its next cell runs in a fresh kernel.
func (w *kernelWalk) hold(t *testing.T, who string) {
	t.Helper()
	label := w.o.name + ":" + w.id
	w.stop(t, who, "stop --hold", "stopped kernel "+label+": parked by its supervisor, which keeps its place (held down until started again")
	if a := w.d.do(t, "execute "+strconv.Quote("print('ran')")); a.Status == "ok" || strings.Contains(a.Stdout, "ran") {
		t.Errorf("a cell ran while the kernel was held down: %+v", a)
	}
	w.stop(t, who, "start", "kernel "+label+": hold lifted")
	w.freshKernel(t, "a cell after "+who+"'s start")
}

// stop runs who's stop, stop --hold or start of the kernel (root names it
// USER:ID, the owner ID) and checks what it says, and the state after:
// parked (held after stop --hold), its tree and spare gone.
func (w *kernelWalk) stop(t *testing.T, who, command, says string) {
	t.Helper()
	args := strings.Fields(command)
	var code int
	var stdout, stderr string
	if who == "root" {
		code, stdout, stderr = w.o.asRoot(t, append(args, w.o.name+":"+w.id)...)
	} else {
		code, stdout, stderr = w.o.runSplit(t, append(args, w.id)...)
	}
	if code != 0 || !strings.Contains(stdout, says) {
		t.Fatalf("%s's %s (exit %d), want %q:\n%s%s\nthe kernel's log:\n%s", who, command, code, says, stdout, stderr, e2eTail(w.d.kernelLog(), 3000))
	}
	was := w.want.spare
	w.want.state, w.want.hold, w.want.kernel, w.want.spare = record.PhaseParked, command == "stop --hold", 0, [2]int{}
	w.gone(t, "after "+who+"'s "+command+": the waiting spare and its standby", was[:]...)
	w.check(t, "after "+who+"'s "+command)
}

// gone waits until none of pids (0: none) is alive; what is alive 10 s
// later is an error.
func (w *kernelWalk) gone(t *testing.T, what string, pids ...int) {
	t.Helper()
	var left []int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left = slices.DeleteFunc(slices.Clone(pids), func(p int) bool { return p == 0 || !alive(p) })
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("%s: processes %v still run 10 s later", what, left)
	}
}
