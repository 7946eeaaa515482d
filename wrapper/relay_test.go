package wrapper

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"golang.org/x/crypto/nacl/box"
	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/zmtp"
)

func TestRelayRoundTripIsByteExact(t *testing.T) {
	h := startHarness(t)
	buf := make([]byte, 5<<20)
	rand.Read(buf)
	sent := h.execute("hello", [][]byte{buf, []byte("second buffer")})
	if name, text := h.nextStream(5 * time.Second); name != "stdout" || text != "hello" {
		t.Fatalf("stream = %s %q, want stdout hello", name, text)
	}
	typ, c := h.reply(h.shell, 5*time.Second)
	if typ != "execute_reply" || c["status"] != "ok" {
		t.Fatalf("reply %s %v", typ, c)
	}
	if got, want := c["frames_sha256"], framesHash(sent); got != want {
		t.Fatalf("kernel received different bytes: sha256 %v, sent %v", got, want)
	}
	// Heartbeat: the REQ client's ping comes back unchanged.
	testutil.NoErr(t, h.hb.Send(zmq4.NewMsg([]byte("ping-42"))))
	m, err := recvTimeout(h.hb, 5*time.Second)
	if err != nil || string(m.Frames[len(m.Frames)-1]) != "ping-42" {
		t.Fatalf("heartbeat echo = %q, %v", m.Frames, err)
	}
}

func TestRelayStdinUsesShellIdentity(t *testing.T) {
	h := startHarness(t)
	h.execute("input", nil)
	typ, c := h.reply(h.stdin, 5*time.Second)
	if typ != "input_request" || c["prompt"] != "? " {
		t.Fatalf("stdin got %s %v, want input_request", typ, c)
	}
	h.send(h.stdin, "input_reply", nil, map[string]any{"value": "forty-two"})
	if _, text := h.nextStream(5 * time.Second); text != "got forty-two" {
		t.Fatalf("kernel saw %q", text)
	}
}

func TestShutdownKillsEscapedTreeAndReplies(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		opts       []cgroup.V2Option
		wantMode   string
	}{
		{name: "auto", mode: cgroup.Auto, wantMode: "mode=v2"},
		{name: "v2 moved after fork", mode: cgroup.ModeV2, wantMode: "mode=v2",
			opts: []cgroup.V2Option{cgroup.WithoutCloneInto()}},
		{name: "v1", mode: cgroup.ModeV1, wantMode: "mode=v1"},
		{name: "proc", mode: cgroup.ModeProc, wantMode: "mode=proc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := ""
			switch tc.mode {
			case cgroup.ModeV1:
				parent = requireFreezer(t)
			case cgroup.ModeProc:
			default:
				parent = requireCgroupV2(t)
			}
			h := startHarnessWith(t, func(c *Config) { c.Cgroup, c.v2opts = tc.mode, tc.opts })
			if !strings.Contains(h.stderr.String(), tc.wantMode) {
				t.Fatalf("containment not %s; log:\n%s", tc.wantMode, h.stderr)
			}
			pid := h.spawnEscapee()

			start := time.Now()
			h.send(h.control, "shutdown_request", nil, map[string]any{"restart": true})
			typ, _ := h.reply(h.control, 3*time.Second)
			if typ != "shutdown_reply" {
				t.Fatalf("control got %s", typ)
			}
			if code := h.exitCode(2500 * time.Millisecond); code != 0 {
				t.Fatalf("exit code %d, want 0; log:\n%s", code, h.stderr)
			}
			took := time.Since(start)
			if pidAlive(pid) {
				t.Fatalf("setsid'd grandchild %d survived the shutdown", pid)
			}
			if !strings.Contains(h.stderr.String(), "kernel stopped") {
				t.Fatalf("no lifecycle line in log:\n%s", h.stderr)
			}
			// The fake kernel never broadcasts its shutdown_reply on iopub
			// (ipykernel does, after terminating its children): the
			// supervisor does it for the other clients.
			if !h.iopubHas("shutdown_reply", time.Second) {
				t.Fatal("no shutdown_reply broadcast on iopub")
			}
			if parent != "" {
				if left, _ := filepath.Glob(filepath.Join(parent, "tfgpu-"+testKernelID+"-*")); len(left) > 0 {
					t.Fatalf("cgroup left behind: %v", left)
				}
			}
			t.Logf("shutdown_request → supervisor exit: %v", took)
		})
	}
}

func TestBadSignatureIsRelayedButNotActedOn(t *testing.T) {
	h := startHarness(t)
	frames, _ := jmsg.NewMessage(h.signer, nil, "shutdown_request", nil, "s", map[string]any{"restart": false})
	p, _ := jmsg.Split(frames)
	p.Signature[0] ^= 1 // the frames alias p: this tampers the message
	testutil.NoErr(t, h.control.SendMulti(zmq4.NewMsgFrom(frames...)))
	// The relay decides where it logs the bad signature (relay.verified):
	// that line is the event. A forged request acted on would never be
	// logged so, and would stop the supervisor.
	testutil.WaitFor(t, 5*time.Second, "the forged message to be logged", func() bool {
		return strings.Contains(h.stderr.String(), "bad signature")
	})
	h.send(h.shell, "kernel_info_request", nil, map[string]any{})
	if typ, _ := h.reply(h.shell, 5*time.Second); typ != "kernel_info_reply" {
		t.Fatalf("kernel no longer answers: %s", typ)
	}
	select {
	case c := <-h.done:
		t.Fatalf("supervisor stopped (exit %d) on a forged shutdown_request", c)
	default:
	}
}

// The kernel's usage_reply (jupyter-resource-usage's question) comes back
// signed, with every field the kernel sent (hostname, pid, cpu_count), the
// supervisor's figures of the whole tree, an escaped process included, and
// the host memory the kernel (without psutil) left out.
func TestUsageReplyHasTheTreeFigures(t *testing.T) {
	h := startHarness(t)
	escapee := h.spawnEscapee()
	h.send(h.control, "usage_request", nil, map[string]any{})
	typ, c := h.reply(h.control, 5*time.Second) // reply checks the signature
	if typ != "usage_reply" {
		t.Fatalf("got %s, want usage_reply", typ)
	}
	if c["hostname"] != "fake-host" || c["cpu_count"] != float64(1) || c["pid"] == nil {
		t.Errorf("the kernel's own fields were not kept: %v", c)
	}
	if n, _ := c["kernel_processes"].(float64); n < 2 {
		t.Errorf("kernel_processes %v: the tree has the kernel and the escaped %d", c["kernel_processes"], escapee)
	}
	if m, _ := c["kernel_memory"].(float64); m < 1<<20 {
		t.Errorf("kernel_memory %v", c["kernel_memory"])
	}
	if _, ok := c["kernel_cpu"].(float64); !ok {
		t.Errorf("kernel_cpu %v", c["kernel_cpu"])
	}
	vm, _ := c["host_virtual_memory"].(map[string]any)
	if total, _ := vm["total"].(float64); total <= 0 {
		t.Errorf("host_virtual_memory not filled in: %v", c["host_virtual_memory"])
	}
	if _, ok := c["gpus"]; ok {
		t.Errorf("GPU figures without NVML: %v", c["gpus"])
	}
}

func TestKernelDeathTellsTheCell(t *testing.T) {
	h := startHarness(t)
	h.execute("exit 3", nil)
	name, text := h.nextStream(5 * time.Second)
	if name != "stderr" || !strings.Contains(text, "exit code 3") {
		t.Fatalf("cell got %s %q, want stderr naming exit code 3", name, text)
	}
	typ, c := h.reply(h.shell, 5*time.Second)
	if typ != "execute_reply" || c["status"] != "error" {
		t.Fatalf("got %s %v, want an error execute_reply", typ, c)
	}
	if code := h.exitCode(5 * time.Second); code != 3 {
		t.Fatalf("exit code %d, want the kernel's 3", code)
	}
}

// A subscriber that stops reading (here: behind a proxy that stops
// forwarding) must not stall the other client, and its queue is bounded.
func TestSlowSubscriberDoesNotStallOthers(t *testing.T) {
	sh := zmtp.NewShared(zmtp.Limits{QueueLimit: 1 << 20, HardLimit: 4 << 20}, nil)
	h := startHarnessWith(t, func(c *Config) { c.shared = sh })

	var paused atomic.Bool
	proxy := stallingProxy(t, h.ci.Endpoint(jmsg.IOPub)[len("tcp://"):], &paused)
	slow := zmq4.NewSub(t.Context())
	_ = slow.SetOption(zmq4.OptionSubscribe, "")
	testutil.NoErr(t, slow.Dial("tcp://"+proxy))
	defer slow.Close()
	h.waitSubscribed(slow)
	paused.Store(true)

	const n = 4000 // 8 KiB each: 32 MB, far past the stalled peer's 1 MiB queue
	h.execute(fmt.Sprintf("flood %d", n), nil)
	// The reply comes on shell after the kernel has sent every message.
	if typ, _ := h.reply(h.shell, 60*time.Second); typ != "execute_reply" {
		t.Fatalf("got %s", typ)
	}
	got := 0
drain:
	for got < n {
		select {
		case m := <-h.iopubMsgs:
			if bytes.Contains(m.Frames[0], []byte("stream")) {
				got++
			}
		case <-time.After(time.Second):
			break drain
		}
	}
	// The fast client is dropped from only when it itself falls 1 MiB
	// behind (a loaded machine); it must never be held up by the stalled one.
	if got < n/2 {
		t.Fatalf("fast client got %d of %d stream messages", got, n)
	}
	t.Logf("fast client got %d of %d", got, n)
	dropped := sh.Dropped()
	if dropped == 0 {
		t.Fatalf("the stalled subscriber's queue was never bounded")
	}
	t.Logf("messages dropped for the stalled subscriber: %d", dropped)
}

// waitSubscribed waits until sub gets the kernel's iopub: cells that
// publish only their busy and idle statuses ("flood 0", no stream a test
// would count) until one reaches it.
func (h *harness) waitSubscribed(sub zmq4.Socket) {
	t := h.t
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		h.execute("flood 0", nil)
		if typ, _ := h.reply(h.shell, 10*time.Second); typ != "execute_reply" {
			t.Fatalf("got %s", typ)
		}
		if _, err := recvTimeout(sub, 100*time.Millisecond); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the subscriber never got the kernel's iopub")
		}
	}
}

// stallingProxy forwards TCP to target until paused, then stops reading
// from the target: to the supervisor it is a client that stopped reading.
func stallingProxy(t *testing.T, target string, paused *atomic.Bool) string {
	return proxy(t, target, paused, 0)
}

// throttledProxy forwards TCP to target, server to client at most rate
// bytes a second: a client that reads, but slowly.
func throttledProxy(t *testing.T, target string, rate int) string {
	return proxy(t, target, &atomic.Bool{}, rate)
}

// proxy forwards TCP between one client and target; server to client it
// stops while paused and, with rate > 0, goes at most rate bytes a second.
func proxy(t *testing.T, target string, paused *atomic.Bool, rate int) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testutil.NoErr(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			return
		}
		t.Cleanup(func() { c.Close(); up.Close() })
		go io.Copy(up, c)
		buf := make([]byte, 64<<10)
		for !paused.Load() {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
			if rate > 0 {
				time.Sleep(time.Duration(n) * time.Second / time.Duration(rate))
			}
		}
	}()
	return l.Addr().String()
}

func TestBadConnectionFileExits2(t *testing.T) {
	dir := t.TempDir()
	good, _ := writeConn(t, dir)
	data, _ := os.ReadFile(good)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	withFields := func(name, fields string) string {
		return write(name, strings.Replace(string(data), "{", "{"+fields+",", 1))
	}
	pub, sec := curvePair(t)
	_, sec2 := curvePair(t)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing file", filepath.Join(dir, "nope.json"), "nope.json"},
		{"not json", write("bad.json", "{not json"), "bad.json"},
		{"missing port", write("noport.json", strings.Replace(string(data), `"shell_port"`, `"shell_portx"`, 1)), "shell_port"},
		{"unknown scheme", write("scheme.json", strings.Replace(string(data), "hmac-sha256", "hmac-foo", 1)), "hmac-foo"},
		// jupyter_client >= 8.9 with transport_encryption auto/required
		// writes a CurveZMQ key pair; anything else about CURVE is refused.
		{"curve half pair", withFields("half.json", `"curve_publickey": "`+pub+`"`), "curve_publickey without its pair"},
		{"curve keys not a pair", withFields("pair.json", `"curve_publickey": "`+pub+`", "curve_secretkey": "`+sec2+`"`), "not the secret key's"},
		{"curve key not z85", withFields("z85.json", `"curve_publickey": "`+pub+`", "curve_secretkey": "`+strings.Replace(sec, sec[:1], "~", 1)+`"`), "secret key"},
		{"curve key short", withFields("short.json", `"curve_publickey": "`+pub[:35]+`", "curve_secretkey": "`+sec+`"`), "public key of 35 characters"},
		{"unknown curve field", withFields("server.json", `"curve_serverkey": "`+pub+`"`), `"curve_serverkey"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr testutil.Buffer
			code := Run(t.Context(), Config{ConnFile: tc.path, Argv: []string{"/bin/false"}, Stderr: &stderr,
				Log: discardLogger()})
			out := stderr.String()
			if code != ExitUsage || strings.Count(out, "\n") != 1 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line naming %q", code, out, tc.want)
			}
			for _, key := range []string{pub, sec, sec2} {
				if strings.Contains(out, key[5:35]) {
					t.Fatalf("stderr shows a key: %q", out)
				}
			}
		})
	}
}

func TestPortInUseExits2(t *testing.T) {
	path, ci := writeConn(t, t.TempDir())
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ci.Ports[jmsg.Control]))
	testutil.NoErr(t, err)
	defer l.Close()
	var stderr testutil.Buffer
	code := Run(t.Context(), Config{ConnFile: path, Argv: []string{"/bin/false"}, Stderr: &stderr, Log: discardLogger()})
	out := stderr.String()
	if code != ExitUsage || strings.Count(out, "\n") != 1 || !strings.Contains(out, "control port") ||
		!strings.Contains(out, "address already in use") {
		t.Fatalf("exit %d, stderr %q", code, out)
	}
}

// jupyter_client sends SIGINT before every shutdown, also to a kernel that
// is still starting. Before the kernel has said anything it is not
// forwarded (it would kill it); after, it goes to the kernel's group.
func TestSIGINTIsForwardedOnlyOnceTheKernelIsReady(t *testing.T) {
	t.Setenv("TFGPU_FAKE_DELAY", "1s")
	go func() {
		time.Sleep(300 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	}()
	h := startHarness(t) // fails if the early SIGINT killed the kernel
	if !strings.Contains(h.stderr.String(), "SIGINT before the kernel is ready") {
		t.Fatalf("early SIGINT not seen; log:\n%s", h.stderr)
	}
	// The fake kernel is a Go program without a SIGINT handler: a
	// forwarded SIGINT kills it, which proves it arrived.
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	if code := h.exitCode(5 * time.Second); code != 128+int(syscall.SIGINT) {
		t.Fatalf("exit %d, want %d (kernel killed by the forwarded SIGINT); log:\n%s",
			code, 128+int(syscall.SIGINT), h.stderr)
	}
}

// SIGTERM (and SIGHUP) to the supervisor is an orderly stop: the whole
// tree dies, the exit code is 0.
func TestSIGTERMStopsTheTree(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			h := startHarness(t)
			pid := h.spawnEscapee()
			syscall.Kill(os.Getpid(), sig)
			if code := h.exitCode(3 * time.Second); code != 0 {
				t.Fatalf("exit %d, want 0; log:\n%s", code, h.stderr)
			}
			if pidAlive(pid) {
				t.Fatalf("grandchild %d survived %v", pid, sig)
			}
			if !strings.Contains(h.stderr.String(), "reason="+unix.SignalName(sig)) {
				t.Fatalf("stop reason not logged:\n%s", h.stderr)
			}
		})
	}
}

// A supervisor that is SIGKILLed, with its watcher (both killed: an OOM
// kill of the whole session, a kill -9 of both), leaves its kernel's
// escaped processes in the kernel's cgroup; the next supervisor of the
// same kernel id kills them before its kernel starts.
func TestLeftoversOfAKilledSupervisorAreKilledAtNextStart(t *testing.T) {
	requireCgroupV2(t)
	old, cmd := startExternal(t, "")
	pid := old.spawnEscapee()
	kernel := old.kernelState().KernelPID
	w := watcherOf(t, cmd.Process.Pid)
	syscall.Kill(w, syscall.SIGKILL)
	cmd.Process.Kill()
	cmd.Wait()
	old.closeClients()
	testutil.WaitFor(t, 20*time.Second, "the old kernel to die of its parent-death signal", func() bool { return !pidAlive(kernel) })
	if !pidAlive(pid) {
		t.Fatalf("escapee %d died with its supervisor and watcher; nothing left to test", pid)
	}
	h := startHarnessWith(t, func(c *Config) {}) // new connection file, same kernel id
	if pidAlive(pid) {
		t.Fatalf("escapee %d of the killed supervisor still alive after the new start", pid)
	}
	log := h.stderr.String()
	if !strings.Contains(log, "left by a previous supervisor") || !strings.Contains(log, "processes=1") {
		t.Fatalf("leftover kill not logged:\n%s", log)
	}
	if strings.Index(log, "left by a previous supervisor") > strings.Index(log, "kernel started") {
		t.Fatalf("leftovers killed after the new kernel started:\n%s", log)
	}
}

// watcherOf finds the watcher of supervisor sup: its child running this
// program's watch role.
func watcherOf(t *testing.T, sup int) int {
	t.Helper()
	var watcher int
	testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("supervisor %d's watcher", sup), func() bool {
		for _, pid := range testutil.Pids() {
			_, ppid, _ := testutil.ProcStat(pid)
			argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if ppid == sup && bytes.Contains(argv, []byte("\x00"+WatchCommand+"\x00")) {
				watcher = pid
				return true
			}
		}
		return false
	})
	return watcher
}

// A SIGKILLed supervisor's watcher finishes its kernel at once, without
// waiting for another start: the escaped process is dead, the cgroup and
// the state file gone, in every containment mode.
func TestWatcherFinishesWhenTheSupervisorIsKilled(t *testing.T) {
	for _, mode := range []string{cgroup.ModeV2, cgroup.ModeV1, cgroup.ModeProc} {
		t.Run(mode, func(t *testing.T) {
			h, cmd, pid, st := startExternalIn(t, mode)
			took := h.killSupervisor(cmd, pid)
			t.Logf("tree dead and watcher gone %v after the SIGKILL", took.Round(time.Millisecond))
			if st.Cgroup != "" {
				if _, err := os.Stat(st.Cgroup); !os.IsNotExist(err) {
					t.Fatalf("cgroup %s left: %v", st.Cgroup, err)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(os.Getenv("TFGPU_STATE_DIR"), "*.json")); len(left) > 0 {
				t.Fatalf("state file left: %v", left)
			}
			if !strings.Contains(h.stderr.String(), "finished its kernel") {
				t.Fatalf("the watcher did not say what it did:\n%s", h.stderr)
			}
		})
	}
}

// A subscriber that reads, but slower than the kernel writes, gets every
// message: the relay holds up the kernel's output instead of dropping.
func TestSlowButReadingSubscriberLosesNothing(t *testing.T) {
	// Without the hold-up the slow client's queue would pass the hard
	// limit (2 MiB of the 16 MB sent) and lose messages.
	sh := zmtp.NewShared(zmtp.Limits{QueueLimit: 256 << 10, HardLimit: 2 << 20}, nil)
	h := startHarnessWith(t, func(c *Config) { c.shared = sh })
	proxy := throttledProxy(t, h.ci.Endpoint(jmsg.IOPub)[len("tcp://"):], 8<<20) // 8 MB/s
	slow := zmq4.NewSub(t.Context())
	_ = slow.SetOption(zmq4.OptionSubscribe, "")
	testutil.NoErr(t, slow.Dial("tcp://"+proxy))
	defer slow.Close()
	h.waitSubscribed(slow)
	const n = 2000 // 8 KiB each: 16 MB, two seconds at the slow client's pace
	h.execute(fmt.Sprintf("flood %d", n), nil)
	got := 0
	deadline := time.After(60 * time.Second)
	for got < n {
		m, err := recvTimeout(slow, 10*time.Second)
		if err != nil {
			dropped := sh.Dropped()
			t.Fatalf("slow client got %d of %d (%d dropped): %v", got, n, dropped, err)
		}
		if bytes.Contains(m.Frames[0], []byte("stream")) {
			got++
		}
		select {
		case <-deadline:
			t.Fatalf("slow client got %d of %d in 60 s", got, n)
		default:
		}
	}
	dropped := sh.Dropped()
	if dropped != 0 {
		t.Fatalf("%d messages dropped for a client that kept reading", dropped)
	}
}

// A message over --max-message-size costs its sender the connection and
// nothing else; the log names the limit.
func TestMessageOverTheLimitCostsOnlyTheConnection(t *testing.T) {
	h := startHarnessWith(t, func(c *Config) { c.Limits.MaxMessage = 1 << 20 })
	big := zmq4.NewDealer(t.Context(), zmq4.WithID(zmq4.SocketIdentity("big-sender")))
	defer big.Close()
	testutil.NoErr(t, big.Dial(h.ci.Endpoint(jmsg.Shell)))
	frames, _ := jmsg.NewMessage(h.signer, nil, "comm_msg", nil, "s", map[string]any{})
	frames = append(frames, make([]byte, 2<<20))
	// The supervisor may cut the connection before the last byte is
	// written; the sender then sees EPIPE or ECONNRESET, which is the
	// point of the test, not a failure of it.
	if err := big.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(h.stderr.String(), "--max-message-size") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(h.stderr.String(), "--max-message-size") {
		t.Fatalf("no log line naming the limit:\n%s", h.stderr)
	}
	h.send(h.shell, "kernel_info_request", nil, map[string]any{})
	if typ, _ := h.reply(h.shell, 5*time.Second); typ != "kernel_info_reply" {
		t.Fatalf("the other client no longer gets answers: %s", typ)
	}
}

// killSupervisor SIGKILLs the external supervisor cmd and waits for its
// watcher to kill escapee pid and leave (the events; the bound is only a
// failure's), and returns how long it took: a figure for the log, no
// test asserts it.
func (h *harness) killSupervisor(cmd *exec.Cmd, pid int) time.Duration {
	t := h.t
	t.Helper()
	w := watcherOf(t, cmd.Process.Pid)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	killed := time.Now()
	cmd.Process.Kill()
	cmd.Wait()
	h.closeClients()
	testutil.WaitFor(t, 20*time.Second, "the watcher to kill the escapee", func() bool { return !pidAlive(pid) })
	took := time.Since(killed)
	testutil.WaitFor(t, 20*time.Second, "the watcher to leave once it finished", func() bool { return !pidAlive(w) })
	return took
}

// curvePair returns a fresh CurveZMQ key pair in Z85, as jupyter_client
// writes curve_publickey and curve_secretkey.
func curvePair(t *testing.T) (public, secret string) {
	t.Helper()
	pub, sec, err := box.GenerateKey(rand.Reader)
	testutil.NoErr(t, err)
	return zmtp.Z85Encode(pub[:]), zmtp.Z85Encode(sec[:])
}
