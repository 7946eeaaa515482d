package wrapper

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/cgroup"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// harness runs Run in-process around the Go fake kernel (fakekernel_test.go)
// and connects a Go client to the outer sockets, as jupyter_client would.
type harness struct {
	t      *testing.T
	path   string
	ci     *jmsg.ConnInfo
	signer *jmsg.Signer
	stderr *testutil.Buffer
	// firstStderr are the stderr streams the first cell (connect's sync)
	// got: what the supervisor tells the first cell.
	firstStderr []string
	done        chan int
	cancel      context.CancelFunc

	shell, control, stdin, hb, iopub zmq4.Socket
	iopubMsgs                        chan zmq4.Msg
}

// testPorts are five free loopback ports (freePorts).
func testPorts(t *testing.T) [5]int {
	ports, err := freePorts()
	testutil.NoErr(t, err)
	return ports
}

// testKernelID is the kernel id of every harness kernel: its own per test
// binary, so that two runs of these tests on one host (two checkouts, CI
// beside a developer) never share a cgroup name or a record.
var testKernelID = fmt.Sprintf("test-%d", os.Getpid())

func writeConn(t *testing.T, dir string) (string, *jmsg.ConnInfo) {
	return writeConnOf(t, dir, testKernelID)
}

// writeConnOf writes, in dir, the connection file of kernel id (its own
// ports).
func writeConnOf(t *testing.T, dir, id string) (string, *jmsg.ConnInfo) {
	ci := &jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1", Ports: testPorts(t),
		Key: "a0436f6c-1916-498b-8eb9-e81ab9368e84", SignatureScheme: "hmac-sha256"}
	path := filepath.Join(dir, "kernel-"+id+".json")
	testutil.NoErr(t, jmsg.WriteFile(path, ci))
	return path, ci
}

// startHarness starts the supervisor on the fake kernel and connects clients.
func startHarness(t *testing.T) *harness { return startHarnessWith(t, nil) }

// startHarnessWith lets the test adjust the supervisor's Config.
func startHarnessWith(t *testing.T, adjust func(*Config)) *harness {
	t.Helper()
	h := newHarness(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	lg := slog.New(slog.NewTextHandler(h.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := Config{ConnFile: h.path, Argv: []string{os.Args[0], "-test.run=^$", "-f", h.path}, Log: lg, Stderr: h.stderr}
	if adjust != nil {
		adjust(&cfg)
	}
	go func() { h.done <- Run(ctx, cfg) }()
	t.Cleanup(h.close)
	h.connect()
	return h
}

// startExternal runs the supervisor as a process of its own (the test
// binary with TFGPU_TEST_SUPERVISOR, see TestMain), so a test can SIGKILL it.
// path "" writes a new connection file.
func startExternal(t *testing.T, path string) (*harness, *exec.Cmd) {
	t.Helper()
	return startExternalAs(t, path, nil)
}

// startExternalAs is startExternal with the supervisor's process attributes
// (another user, a cgroup of its own) and, when sys sets a Credential, the
// test binary copied where that user can run it.
func startExternalAs(t *testing.T, path string, sys *syscall.SysProcAttr) (*harness, *exec.Cmd) {
	t.Helper()
	h, cmd := launchExternal(t, path, sys)
	h.connect()
	return h, cmd
}

// launchExternal is startExternalAs without the wait for the kernel: the
// harness connects when the test calls h.connect.
func launchExternal(t *testing.T, path string, sys *syscall.SysProcAttr) (*harness, *exec.Cmd) {
	t.Helper()
	h := newHarness(t, path)
	exe := os.Args[0]
	if sys != nil && sys.Credential != nil {
		exe = copyForUser(t, exe, int(sys.Credential.Uid), h)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	if exe != os.Args[0] {
		cmd.Dir = filepath.Dir(exe) // userCwd
	}
	cmd.Env = append(os.Environ(), "TFGPU_TEST_SUPERVISOR="+h.path)
	cmd.Stderr = h.stderr
	cmd.SysProcAttr = sys
	testutil.NoErr(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		h.closeClients()
	})
	return h, cmd
}

// newHarness prepares a harness on the connection file path, or on a new
// one when path is "".
func newHarness(t *testing.T, path string) *harness {
	t.Setenv("TFGPU_FAKE_KERNEL", "1")
	if os.Getenv("TFGPU_STATE_DIR") == "" { // one per test, shared by its supervisors
		t.Setenv("TFGPU_STATE_DIR", testutil.PrivateDir(t))
	}
	var ci *jmsg.ConnInfo
	var err error
	if path == "" {
		path, ci = writeConn(t, t.TempDir())
	} else if ci, err = jmsg.Load(path); err != nil {
		t.Fatal(err)
	}
	signer, err := jmsg.NewSigner(ci.SignatureScheme, ci.Key)
	testutil.NoErr(t, err)
	return &harness{t: t, path: path, ci: ci, signer: signer, stderr: &testutil.Buffer{},
		done: make(chan int, 1), iopubMsgs: make(chan zmq4.Msg, 100000)}
}

// awaitKernelInfo sends kernel_info_requests until the shell answers one
// (failing with what and the supervisor's log after 20 s); every request
// sent is answered eventually (the relay queues them until the kernel is
// up), so the replies to the others are consumed here: a stray one would
// be taken for the test's own.
func (h *harness) awaitKernelInfo(what string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for sent := 1; ; sent++ {
		h.send(h.shell, "kernel_info_request", nil, map[string]any{})
		if _, err := recvTimeout(h.shell, 500*time.Millisecond); err == nil {
			h.discardReplies(h.shell, sent-1)
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s; supervisor log:\n%s", what, h.stderr)
		}
	}
}

// connect connects the clients and waits until the kernel answers.
func (h *harness) connect() {
	t := h.t
	t.Helper()
	h.dial()
	// Wait until the kernel answers and iopub is subscribed end to end.
	h.awaitKernelInfo("kernel never answered")
	// The supervisor tells the first cell its notices once, on iopub; a
	// SUB's subscription travels on its own, so under load it could reach
	// the door after that cell's stderr was published (to no one). A
	// status on iopub (the kernel's for a kernel_info) says it is in place.
	deadline := time.Now().Add(20 * time.Second)
	for sent := 0; ; {
		select {
		case <-h.iopubMsgs:
			h.discardReplies(h.shell, sent)
		case <-time.After(300 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("nothing came on iopub; supervisor log:\n%s", h.stderr)
			}
			h.send(h.shell, "kernel_info_request", nil, map[string]any{})
			sent++
			continue
		}
		break
	}
	h.execute("sync", nil)
	for syncs := 1; ; {
		select {
		case m := <-h.iopubMsgs:
			if !bytes.Contains(lastContent(m), []byte(`"sync"`)) {
				if bytes.Contains(lastContent(m), []byte(`"name":"stderr"`)) {
					h.firstStderr = append(h.firstStderr, string(lastContent(m)))
				}
				continue
			}
			h.discardReplies(h.shell, syncs)
			h.drainIOPub()
			return
		case <-time.After(300 * time.Millisecond):
			h.execute("sync", nil)
			syncs++
		}
	}
}

// dial connects the clients' five sockets, as jupyter_client does, and
// starts collecting iopub.
func (h *harness) dial() {
	t, ci := h.t, h.ci
	t.Helper()
	cctx := context.Background()
	id := zmq4.WithID(zmq4.SocketIdentity("client-" + t.Name()))
	h.shell = zmq4.NewDealer(cctx, id)
	h.stdin = zmq4.NewDealer(cctx, id)
	h.control = zmq4.NewDealer(cctx)
	h.hb = zmq4.NewReq(cctx)
	h.iopub = zmq4.NewSub(cctx)
	_ = h.iopub.SetOption(zmq4.OptionSubscribe, "")
	for ch, s := range map[jmsg.Channel]zmq4.Socket{jmsg.Shell: h.shell, jmsg.Stdin: h.stdin,
		jmsg.Control: h.control, jmsg.HB: h.hb, jmsg.IOPub: h.iopub} {
		if err := s.Dial(ci.Endpoint(ch)); err != nil {
			t.Fatalf("dial %s: %v; supervisor log:\n%s", ch, err, h.stderr)
		}
	}
	go func() {
		for {
			m, err := h.iopub.Recv()
			if err != nil {
				return
			}
			h.iopubMsgs <- m
		}
	}()
}

func (h *harness) discardReplies(s zmq4.Socket, n int) {
	for i := 0; i < n; i++ {
		if _, err := recvTimeout(s, 10*time.Second); err != nil {
			h.t.Fatalf("reply %d of %d to the start-up requests: %v", i+1, n, err)
		}
	}
}

func (h *harness) close() {
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Errorf("supervisor did not stop; log:\n%s", h.stderr)
	}
	h.closeClients()
}

func (h *harness) closeClients() {
	for _, c := range []zmq4.Socket{h.shell, h.stdin, h.control, h.hb, h.iopub} {
		c.Close()
	}
}

// exitCode waits for Run to return.
func (h *harness) exitCode(within time.Duration) int {
	h.t.Helper()
	select {
	case c := <-h.done:
		h.done <- c // close() reads it again
		return c
	case <-time.After(within):
		h.t.Fatalf("supervisor still running after %v; log:\n%s", within, h.stderr)
		return -1
	}
}

func (h *harness) send(s zmq4.Socket, typ string, buffers [][]byte, content any) [][]byte {
	h.t.Helper()
	frames, err := jmsg.NewMessage(h.signer, nil, typ, nil, "client-session", content)
	testutil.NoErr(h.t, err)
	frames = append(frames, buffers...)
	testutil.NoErr(h.t, s.SendMulti(zmq4.NewMsgFrom(frames...)))
	return frames
}

func (h *harness) execute(code string, buffers [][]byte) [][]byte {
	return h.send(h.shell, "execute_request", buffers, map[string]any{"code": code, "silent": false,
		"store_history": false, "user_expressions": map[string]any{}, "allow_stdin": true, "stop_on_error": true})
}

func (h *harness) drainIOPub() {
	for {
		select {
		case <-h.iopubMsgs:
		case <-time.After(50 * time.Millisecond):
			return
		}
	}
}

// nextStream returns the text of the next iopub stream message.
func (h *harness) nextStream(within time.Duration) (name, text string) {
	h.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case m := <-h.iopubMsgs:
			p, err := jmsg.Split(m.Frames)
			if err != nil {
				continue
			}
			if t, _ := jmsg.MsgType(p.Header); t != "stream" {
				continue
			}
			var c struct{ Name, Text string }
			_ = json.Unmarshal(p.Content, &c)
			return c.Name, c.Text
		case <-deadline:
			h.t.Fatalf("no stream message within %v; log:\n%s", within, h.stderr)
		}
	}
}

// inboxes holds one reader goroutine's channel per client socket, so that a
// receive that timed out never leaves a goroutine behind that would take the
// next message.
var inboxes sync.Map // zmq4.Socket → chan zmq4.Msg

func inbox(s zmq4.Socket) chan zmq4.Msg {
	if c, ok := inboxes.Load(s); ok {
		return c.(chan zmq4.Msg)
	}
	c := make(chan zmq4.Msg, 1024)
	if actual, loaded := inboxes.LoadOrStore(s, c); loaded {
		return actual.(chan zmq4.Msg)
	}
	go func() {
		defer close(c)
		for {
			m, err := s.Recv()
			if err != nil {
				return
			}
			c <- m
		}
	}()
	return c
}

func recvTimeout(s zmq4.Socket, d time.Duration) (zmq4.Msg, error) {
	select {
	case m, ok := <-inbox(s):
		if !ok {
			return zmq4.Msg{}, fmt.Errorf("socket closed")
		}
		return m, nil
	case <-time.After(d):
		return zmq4.Msg{}, fmt.Errorf("timeout after %v", d)
	}
}

func lastContent(m zmq4.Msg) []byte {
	p, err := jmsg.Split(m.Frames)
	if err != nil {
		return nil
	}
	return p.Content
}

// reply receives on s and returns msg_type and content, checking the
// signature as jupyter_client would.
func (h *harness) reply(s zmq4.Socket, within time.Duration) (string, map[string]any) {
	h.t.Helper()
	m, err := recvTimeout(s, within)
	if err != nil {
		h.t.Fatalf("no reply: %v; log:\n%s", err, h.stderr)
	}
	p, err := jmsg.Split(m.Frames)
	if err != nil {
		h.t.Fatalf("bad reply: %v", err)
	}
	if !h.signer.Verify(p) {
		h.t.Fatalf("reply signature does not verify")
	}
	typ, _ := jmsg.MsgType(p.Header)
	var c map[string]any
	_ = json.Unmarshal(p.Content, &c)
	return typ, c
}

func framesHash(frames [][]byte) string {
	p, _ := jmsg.Split(frames)
	sum := sha256.New()
	for _, f := range frames[len(p.Idents)+1:] {
		sum.Write(f)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// spawnEscapee has the fake kernel start a setsid'd grandchild that ignores
// SIGTERM, and returns its pid (killed at cleanup if it survives).
func (h *harness) spawnEscapee() int {
	h.t.Helper()
	h.execute("spawn", nil)
	_, text := h.nextStream(5 * time.Second)
	pid, err := strconv.Atoi(text)
	if err != nil || !pidAlive(pid) {
		h.t.Fatalf("spawned grandchild %q not running (%v)", text, err)
	}
	h.t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if typ, _ := h.reply(h.shell, 5*time.Second); typ != "execute_reply" {
		h.t.Fatalf("spawn: got %s", typ)
	}
	return pid
}

// iopubHas reports whether a message of type typ arrives on iopub within d
// (messages before it are consumed).
func (h *harness) iopubHas(typ string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case m := <-h.iopubMsgs:
			if p, err := jmsg.Split(m.Frames); err == nil {
				if t, err := jmsg.MsgType(p.Header); err == nil && t == typ {
					return true
				}
			}
		case <-deadline:
			return false
		}
	}
}

// stopAndCheck shuts the kernel down through the control channel and
// checks that the external supervisor cmd exits 0 and that escapee pid is
// gone with the tree.
func (h *harness) stopAndCheck(cmd *exec.Cmd, pid int) {
	h.t.Helper()
	h.send(h.control, "shutdown_request", nil, map[string]any{"restart": false})
	if typ, _ := h.reply(h.control, 3*time.Second); typ != "shutdown_reply" {
		h.t.Fatalf("control got %q, want shutdown_reply", typ)
	}
	if err := cmd.Wait(); err != nil {
		h.t.Fatalf("supervisor: %v; log:\n%s", err, h.stderr)
	}
	if pidAlive(pid) {
		h.t.Fatalf("escapee %d survived", pid)
	}
}

// requireMode fails the test in CI (CI=true), where it must run, and
// skips it elsewhere, unless a cgroup of the mode can be created and
// removed here. It returns the directory the supervisor's kernel cgroups
// go in.
func requireMode(t *testing.T, mode string) string {
	t.Helper()
	testutil.Integration(t)
	o, err := cgroup.Open(mode, fmt.Sprintf("probe-%d", os.Getpid()), cgroup.Options{})
	if err != nil {
		testutil.RequireOrSkip(t, "needs a writable %s cgroup hierarchy: %v", mode, err)
	}
	dir := filepath.Dir(o.Tree.Dir())
	testutil.NoErr(t, o.Tree.Close())
	return dir
}

// requireCgroupV2 is requireMode for cgroup v2.
func requireCgroupV2(t *testing.T) string { return requireMode(t, cgroup.ModeV2) }

// requireFreezer is requireMode for the v1 freezer hierarchy.
func requireFreezer(t *testing.T) string { return requireMode(t, cgroup.ModeV1) }

// copyForUser copies the test binary into a directory uid can enter, and
// hands uid the connection file and a state directory of its own.
//
// userCwd: a supervisor run as uid starts in that directory too. It starts
// its watcher and standby in its own working directory, by path
// (watcher.go), and the test's, in a checkout under a 0700 directory
// (mktemp -d), is closed to uid: the watcher would not start, for a
// reason no host has.
func copyForUser(t *testing.T, exe string, uid int, h *harness) string {
	t.Helper()
	dir := t.TempDir()
	// The test's temporary directories are 0700: let uid through the
	// per-test root and into dir; the connection file is chowned below.
	for _, d := range []string{filepath.Dir(dir), dir} {
		testutil.NoErr(t, os.Chmod(d, 0o755))
	}
	b, err := os.ReadFile(exe)
	testutil.NoErr(t, err)
	dst := filepath.Join(dir, "supervisor.test")
	testutil.NoErr(t, os.WriteFile(dst, b, 0o755))
	for _, p := range []string{filepath.Dir(h.path), h.path} {
		testutil.NoErr(t, os.Chown(p, uid, uid))
	}
	state := filepath.Join(dir, "state")
	testutil.NoErr(t, os.Mkdir(state, 0o700))
	testutil.NoErr(t, os.Chown(state, uid, uid))
	t.Setenv("TFGPU_STATE_DIR", state)
	return dst
}
