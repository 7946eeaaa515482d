//go:build linux

package wrapper

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// parkedState orders the supervisor of h's kernel to park it, as
// `tfgpu-kernel stop` does (an order in the state directory, SIGUSR1),
// and returns its record once it says parked.
func (h *harness) park(by, why string) record.State {
	h.t.Helper()
	d, err := record.OpenDir(os.Getenv("TFGPU_STATE_DIR"), false, false)
	testutil.NoErr(h.t, err)
	defer d.Close()
	id := testKernelID // writeConn's kernel file
	testutil.NoErr(h.t, d.WriteOrder(id, record.Order{By: by, Why: why, At: time.Now()}))
	testutil.NoErr(h.t, syscall.Kill(os.Getpid(), parkSignal))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := d.StateOf(id)
		if err == nil && st.Phase == record.PhaseParked && st.Parked != nil {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("not parked within 10 s (%+v, %v); log:\n%s", st, err, h.stderr)
		}
	}
}

func (h *harness) kernelState() record.State {
	h.t.Helper()
	d, err := record.OpenDir(os.Getenv("TFGPU_STATE_DIR"), false, false)
	testutil.NoErr(h.t, err)
	defer d.Close()
	st, err := d.StateOf(testKernelID)
	testutil.NoErr(h.t, err)
	return st
}

// A stop order parks the kernel: its tree is killed (an escaped process
// too), the supervisor stays and answers the heartbeat, kernel_info (with
// the last kernel's reply) and interrupt itself; the next cell starts a
// fresh kernel and is told why, and only that cell.
func TestStopOrderParksTheKernel(t *testing.T) {
	h := startHarness(t)
	escapee := h.spawnEscapee()
	before := h.kernelState()
	st := h.park("operator", "maintenance")
	if pidAlive(before.KernelPID) || pidAlive(escapee) {
		t.Fatalf("kernel %d alive %v, escapee %d alive %v after the park", before.KernelPID, pidAlive(before.KernelPID), escapee, pidAlive(escapee))
	}
	if st.KernelPID != 0 || st.Parked.By != "operator" || st.Parked.Why != "maintenance" || st.Parked.Killed < 2 {
		t.Fatalf("parked record: %+v %+v", st, st.Parked)
	}
	select {
	case code := <-h.done:
		t.Fatalf("the supervisor ended (exit %d) instead of parking; log:\n%s", code, h.stderr)
	default:
	}

	// The heartbeat is echoed, kernel_info and interrupt answered, by the
	// supervisor.
	testutil.NoErr(t, h.hb.Send(zmq4.NewMsgString("ping")))
	if m, err := recvTimeout(h.hb, 5*time.Second); err != nil || string(m.Frames[0]) != "ping" {
		t.Fatalf("heartbeat while parked: %v %v", m.Frames, err)
	}
	h.send(h.shell, "kernel_info_request", nil, map[string]any{})
	if typ, c := h.reply(h.shell, 5*time.Second); typ != "kernel_info_reply" || c["implementation"] != "fake" {
		t.Fatalf("kernel_info while parked: %s %v", typ, c)
	}
	h.send(h.control, "interrupt_request", nil, map[string]any{})
	if typ, c := h.reply(h.control, 5*time.Second); typ != "interrupt_reply" || c["status"] != "ok" {
		t.Fatalf("interrupt while parked: %s %v", typ, c)
	}
	h.send(h.control, "usage_request", nil, map[string]any{}) // a panel's polling
	if typ, c := h.reply(h.control, 5*time.Second); typ != "usage_reply" || c["kernel_processes"] != float64(0) || c["tfgpu_parked"] == nil {
		t.Fatalf("usage while parked: %s %v", typ, c)
	}
	h.send(h.shell, "comm_info_request", nil, map[string]any{})
	if typ, c := h.reply(h.shell, 5*time.Second); typ != "comm_info_reply" || c["status"] != "ok" {
		t.Fatalf("comm_info while parked: %s %v", typ, c)
	}
	h.send(h.control, "debug_request", nil, map[string]any{"command": "debugInfo"}) // JupyterLab's, when a notebook opens
	if typ, c := h.reply(h.control, 5*time.Second); typ != "debug_reply" || c["status"] != "error" || c["ename"] != "KernelStopped" {
		t.Fatalf("debug_request while parked: %s %v", typ, c)
	}
	if now := h.kernelState(); now.Phase != record.PhaseParked {
		t.Fatalf("a request the supervisor answers started a kernel: %+v", now)
	}

	h.drainIOPub()
	h.execute("hello", nil)
	name, text := h.nextStream(20 * time.Second)
	for _, want := range []string{"the kernel was stopped by operator (maintenance) at ", "killed (", "This is a fresh kernel."} {
		if name != "stderr" || !strings.Contains(text, want) {
			t.Fatalf("the first cell after the park got %s %q, want stderr with %q", name, text, want)
		}
	}
	if name, text = h.nextStream(20 * time.Second); name != "stdout" || text != "hello" {
		t.Fatalf("the first cell ran as %s %q", name, text)
	}
	if typ, c := h.reply(h.shell, 5*time.Second); typ != "execute_reply" || c["status"] != "ok" {
		t.Fatalf("the first cell's reply: %s %v", typ, c)
	}
	after := h.kernelState()
	if after.KernelPID == 0 || after.KernelPID == before.KernelPID || !pidAlive(after.KernelPID) || after.Parked != nil {
		t.Fatalf("no fresh kernel: before %d, after %+v", before.KernelPID, after)
	}
	h.execute("again", nil)
	if name, text = h.nextStream(5 * time.Second); name != "stdout" || text != "again" {
		t.Fatalf("the second cell got %s %q (told twice?)", name, text)
	}
	h.reply(h.shell, 5*time.Second)
}

// A cell running when the order comes gets the notice and an error
// reply; a shutdown_request while parked is answered and ends the
// supervisor with 0, as Jupyter's Shut Down expects.
func TestParkTellsTheRunningCellAndShutsDown(t *testing.T) {
	t.Setenv("TFGPU_FAKE_DELAY", "")
	h := startHarness(t)
	h.execute("input", nil) // waits on stdin: a running cell
	if _, err := recvTimeout(h.stdin, 5*time.Second); err != nil {
		t.Fatalf("no input_request: %v", err)
	}
	h.drainIOPub()
	h.park("", "")
	name, text := h.nextStream(5 * time.Second)
	if name != "stderr" || !strings.Contains(text, "the kernel was stopped at ") || !strings.Contains(text, "the next cell starts a fresh kernel") {
		t.Fatalf("the running cell got %s %q", name, text)
	}
	if typ, c := h.reply(h.shell, 5*time.Second); typ != "execute_reply" || c["status"] != "error" {
		t.Fatalf("the running cell's reply: %s %v", typ, c)
	}
	h.send(h.control, "shutdown_request", nil, map[string]any{"restart": false})
	if typ, c := h.reply(h.control, 5*time.Second); typ != "shutdown_reply" || c["status"] != "ok" {
		t.Fatalf("shutdown while parked: %s %v", typ, c)
	}
	if code := h.exitCode(5 * time.Second); code != 0 {
		t.Fatalf("exit %d after a shutdown while parked; log:\n%s", code, h.stderr)
	}
}

// A hold keeps the parked kernel down: a cell is refused with the
// operator's words and an error reply, and no kernel starts, until the
// hold is lifted (tfgpu-kernel start); then the next cell starts one.
func TestHoldKeepsTheKernelDown(t *testing.T) {
	h := startHarness(t)
	d, err := record.OpenDir(os.Getenv("TFGPU_STATE_DIR"), false, false)
	testutil.NoErr(t, err)
	defer d.Close()
	id := testKernelID
	order := func(o record.Order) {
		t.Helper()
		testutil.NoErr(t, d.WriteOrder(id, o))
		testutil.NoErr(t, syscall.Kill(os.Getpid(), parkSignal))
	}
	waitRecord := func(what string, ok func(record.State) bool) record.State {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if st, err := d.StateOf(id); err == nil && ok(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s; log:\n%s", what, h.stderr)
			}
		}
	}
	order(record.Order{By: "operator", At: time.Now(), Hold: true, Message: "GPU maintenance"})
	st := waitRecord("held", func(st record.State) bool { return st.Parked != nil && st.Parked.Hold })
	if st.Parked.Message != "GPU maintenance" || !st.Parked.HoldUntil.IsZero() {
		t.Fatalf("held record: %+v", st.Parked)
	}
	h.drainIOPub()
	h.execute("refused", nil)
	var told string
	for i := 0; i < 2; i++ { // the park's notice, then the hold's
		_, text := h.nextStream(5 * time.Second)
		told += text
	}
	if !strings.Contains(told, "held down by operator until operator starts it again (tfgpu-kernel start "+testKernelID+"): GPU maintenance") {
		t.Fatalf("the refused cell was told %q", told)
	}
	if typ, c := h.reply(h.shell, 5*time.Second); typ != "execute_reply" || c["status"] != "error" || c["ename"] != "KernelHeld" {
		t.Fatalf("the refused cell's reply: %s %v", typ, c)
	}
	if st, _ := d.StateOf(id); st.Phase != record.PhaseParked || st.KernelPID != 0 {
		t.Fatalf("a kernel started while held: %+v", st)
	}

	order(record.Order{By: "operator", At: time.Now(), Start: true})
	waitRecord("hold lifted", func(st record.State) bool { return st.Parked != nil && !st.Parked.Hold })
	h.execute("after", nil)
	for {
		name, text := h.nextStream(20 * time.Second)
		if name == "stdout" {
			if text != "after" {
				t.Fatalf("the cell after the hold ran as %q", text)
			}
			break
		}
	}
	if typ, c := h.reply(h.shell, 5*time.Second); typ != "execute_reply" || c["status"] != "ok" {
		t.Fatalf("the cell after the hold: %s %v", typ, c)
	}
	waitRecord("a fresh kernel", func(st record.State) bool { return st.KernelPID > 0 && st.Parked == nil })
}

// Every generation of a kernel is contained as the first (#32): inside a
// Slurm job the fresh kernel a park's next cell starts stays in the job's
// cgroups like the first (proc), whatever --cgroup says, rather than get a
// freezer cgroup of its own below the job step (which Slurm's final
// SIGKILL of the step does not empty, and which keeps Slurm from removing
// the job's cgroups).
func TestAFreshKernelAfterAParkIsContainedAsTheFirst(t *testing.T) {
	h := startHarnessWith(t, func(c *Config) {
		c.engine = &engine.Engine{Kind: engine.Slurm, SlurmJob: "12", SlurmStep: "batch", Why: "test"}
		c.Cgroup = cgroup.ModeV1
	})
	first := h.kernelState()
	if first.Containment != cgroup.ModeProc || first.Cgroup != "" {
		t.Fatalf("the first kernel: containment %q, cgroup %q; want proc", first.Containment, first.Cgroup)
	}
	h.park("operator", "maintenance")
	h.drainIOPub()
	h.execute("fresh", nil)
	for {
		name, text := h.nextStream(20 * time.Second)
		if name == "stdout" && text == "fresh" {
			break
		}
		if name != "stderr" {
			t.Fatalf("the first cell after the park got %s %q", name, text)
		}
	}
	h.reply(h.shell, 5*time.Second)
	fresh := h.kernelState()
	if fresh.KernelPID == 0 || fresh.KernelPID == first.KernelPID {
		t.Fatalf("no fresh kernel: %+v", fresh)
	}
	if fresh.Containment != cgroup.ModeProc || fresh.Cgroup != "" || fresh.MemoryCgroup != "" {
		t.Fatalf("the fresh kernel after the park: containment %q, cgroup %q, memory cgroup %q; want proc and none of ours, as the first",
			fresh.Containment, fresh.Cgroup, fresh.MemoryCgroup)
	}
}
