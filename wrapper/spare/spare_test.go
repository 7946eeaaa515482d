package spare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

const (
	python     = "/usr/bin/python3"
	testKernel = "5b2c1e7a" // the short id its waiting title names
)

func requirePython(t *testing.T) {
	t.Helper()
	testutil.Integration(t)
	if out, err := exec.Command(python, "-c", "import ipykernel").CombinedOutput(); err != nil {
		testutil.RequireOrSkip(t, "need %s with ipykernel (apt-get install python3-ipykernel): %s", python, out)
	}
}

// start is a StartFunc of the test's own: ForkExec, and a wait4 for that
// pid alone. Every spare the test starts is killed and reaped at its end.
func start(t *testing.T) StartFunc {
	return func(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan struct{}, error) {
		pid, err := syscall.ForkExec(argv0, argv, attr)
		if err != nil {
			return 0, nil, err
		}
		done := make(chan struct{})
		go func() {
			var ws unix.WaitStatus
			for {
				if _, err := unix.Wait4(pid, &ws, 0, nil); !errors.Is(err, unix.EINTR) {
					break
				}
			}
			close(done)
		}()
		t.Cleanup(func() {
			unix.Kill(pid, unix.SIGKILL)
			<-done
		})
		return pid, done, nil
	}
}

func attr(t *testing.T) syscall.ProcAttr {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	testutil.NoErr(t, err)
	t.Cleanup(func() { null.Close() })
	return syscall.ProcAttr{Files: []uintptr{null.Fd(), null.Fd(), os.Stderr.Fd()}}
}

func env() []string {
	return append(os.Environ(), "PYDEVD_DISABLE_FILE_VALIDATION=1", "PYTHONDONTWRITEBYTECODE=1")
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		ok   bool
		want Launch
	}{
		{[]string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"}, true,
			Launch{Python: "/usr/bin/python3", Args: []string{"-f", "{connection_file}"}}},
		{[]string{"/opt/venv/bin/python", "-Xfrozen_modules=off", "-s", "-m", "ipykernel_launcher", "-f", "{connection_file}"}, true,
			Launch{Python: "/opt/venv/bin/python", Flags: []string{"-Xfrozen_modules=off", "-s"}, Args: []string{"-f", "{connection_file}"}}},
		{[]string{"python3", "-X", "frozen_modules=off", "-m", "ipykernel_launcher", "-f", "c"}, true,
			Launch{Python: "python3", Flags: []string{"-X", "frozen_modules=off"}, Args: []string{"-f", "c"}}},
		{[]string{"/usr/bin/python3", "-m", "ipykernel", "-f", "c"}, false, Launch{}},                 // another module
		{[]string{"/usr/bin/python3", "-c", "import x", "-f", "c"}, false, Launch{}},                  // code
		{[]string{"/usr/bin/python3", "/opt/kernel.py", "-f", "c"}, false, Launch{}},                  // a script
		{[]string{"R", "--slave", "-e", "IRkernel::main()", "--args", "c"}, false, Launch{}},          // not Python
		{[]string{"/usr/bin/python3", "-m"}, false, Launch{}},                                         // cut short
		{[]string{"conda", "run", "-n", "tf", "python", "-m", "ipykernel_launcher"}, false, Launch{}}, // a wrapper
	} {
		got, ok := Parse(tc.argv)
		if ok != tc.ok || strings.Join(got.Flags, " ") != strings.Join(tc.want.Flags, " ") ||
			strings.Join(got.Args, " ") != strings.Join(tc.want.Args, " ") || got.Python != tc.want.Python {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", tc.argv, got, ok, tc.want, tc.ok)
		}
	}
}

// A spare imports ipykernel and waits, titled after its kernel; handed
// the kernel's argv it is the kernel, answers kernel_info on the
// connection file's ports, and ps, pgrep -f and psutil see the argv a cold
// start would have.
func TestSpareBecomesTheKernel(t *testing.T) {
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := Launch{Python: python, Flags: []string{"-Xfrozen_modules=off"}}
	s, err := Start(ctx, l, testKernel, env(), nil, attr(t), start(t))
	testutil.NoErr(t, err)
	checkTitle(t, s.Pid(), []string{python, "(tfgpu-kernel", "spare", "for", "kernel", testKernel + ")"})
	if slices.Contains(pgrep(t, "ipykernel_launcher"), s.Pid()) {
		t.Error("pgrep -f ipykernel_launcher lists the waiting spare: it is not a kernel yet")
	}
	if s.Modules < 200 || len(s.Path) == 0 {
		t.Fatalf("the spare says it imported %d modules, with sys.path %v: not ipykernel", s.Modules, s.Path)
	}
	if !imported(t, s.Pid(), "zmq") {
		t.Error("the spare has not loaded pyzmq's extension: ipykernel was not imported")
	}
	conn, ci := writeConn(t)
	t0 := time.Now()
	if err := s.Go(ctx, []string{"ipykernel_launcher", "-f", conn}, t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	answered := kernelInfo(ctx, t, ci)
	t.Logf("go to kernel_info_reply: %v (the imports were done before)", answered.Sub(t0).Round(time.Millisecond))
	checkTitle(t, s.Pid(), []string{python, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", conn})
}

// A preload list is imported before the spare says it is ready.
func TestSparePreloads(t *testing.T) {
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Launch{Python: python}, testKernel, env(), []string{"json", "sqlite3"}, attr(t), start(t))
	testutil.NoErr(t, err)
	if !imported(t, s.Pid(), "_sqlite3") {
		t.Fatal("the preloaded sqlite3 is not loaded in the spare")
	}
	s.Discard()
}

// A package installed after the spare imported (a directory on its
// sys.path changed) makes it refuse to go: the kernel starts cold with
// the new package.
func TestStaleSpareRefuses(t *testing.T) {
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	site := t.TempDir()
	s, err := Start(ctx, Launch{Python: python}, testKernel, append(env(), "PYTHONPATH="+site), nil, attr(t), start(t))
	testutil.NoErr(t, err)
	time.Sleep(20 * time.Millisecond) // a new mtime, whatever the file system's granularity
	testutil.NoErr(t, os.Mkdir(filepath.Join(site, "newpkg"), 0o755))
	conn, _ := writeConn(t)
	err = s.Go(ctx, []string{"ipykernel_launcher", "-f", conn}, t.TempDir(), nil)
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), site) {
		t.Fatalf("Go after a pip install into %s: %v; want ErrStale naming it", site, err)
	}
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the stale spare did not exit")
	}
}

// A discarded spare exits by itself (its input closed), at once.
func TestDiscardedSpareExits(t *testing.T) {
	requirePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Launch{Python: python}, testKernel, env(), nil, attr(t), start(t))
	testutil.NoErr(t, err)
	s.Discard()
	select {
	case <-s.exited:
	default:
		t.Fatal("Discard returned with the spare alive")
	}
}

// imported reports whether pid has a shared object whose path holds
// name mapped: the C extension of a module it imported (pyzmq's for
// ipykernel, _sqlite3 for sqlite3).
func imported(t *testing.T, pid int, name string) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	testutil.NoErr(t, err)
	return strings.Contains(string(maps), name)
}

func writeConn(t *testing.T) (string, *jmsg.ConnInfo) {
	t.Helper()
	var ports [5]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		testutil.NoErr(t, err)
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	ci := &jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1", Ports: ports, Key: "5f0b3a3c-spare-test", SignatureScheme: "hmac-sha256"}
	path := filepath.Join(t.TempDir(), "kernel-spare.json")
	if err := jmsg.WriteFile(path, ci); err != nil {
		t.Fatal(err)
	}
	return path, ci
}

// kernelInfo asks the kernel on ci's shell port until it answers, and
// returns when it did.
func kernelInfo(ctx context.Context, t *testing.T, ci *jmsg.ConnInfo) time.Time {
	t.Helper()
	signer, err := jmsg.NewSigner(ci.SignatureScheme, ci.Key)
	testutil.NoErr(t, err)
	shell := zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity("spare-test")))
	defer shell.Close()
	if err := shell.Dial(ci.Endpoint(jmsg.Shell)); err != nil {
		t.Fatal(err)
	}
	replies := make(chan zmq4.Msg, 16)
	go func() {
		for {
			m, err := shell.Recv()
			if err != nil {
				return
			}
			replies <- m
		}
	}()
	for {
		frames, err := jmsg.NewMessage(signer, nil, "kernel_info_request", nil, "spare-test", map[string]any{})
		testutil.NoErr(t, err)
		if err := shell.Send(zmq4.NewMsgFrom(frames...)); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-replies:
			p, err := jmsg.Split(m.Frames)
			testutil.NoErr(t, err)
			var h struct {
				MsgType string `json:"msg_type"`
			}
			json.Unmarshal(p.Header, &h)
			if h.MsgType != "kernel_info_reply" {
				t.Fatalf("the kernel answered %s", h.MsgType)
			}
			return time.Now()
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the kernel never answered kernel_info")
		}
	}
}

// checkTitle checks that pid's command line reads as argv, for every
// reader: /proc/PID/cmdline (one title, args joined by spaces: spare.py's
// _retitle), ps -o args, pgrep -f, psutil's cmdline().
func checkTitle(t *testing.T, pid int, argv []string) {
	t.Helper()
	want := strings.Join(argv, " ")
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	testutil.NoErr(t, err)
	if got := strings.TrimSuffix(string(b), "\x00"); got != want {
		t.Errorf("/proc/%d/cmdline = %q; want %q", pid, got, want)
	}
	if !slices.Contains(pgrep(t, "^"+regexp.QuoteMeta(want)+"$"), pid) {
		t.Errorf("pgrep -f %q does not list %d", want, pid)
	}
	out, err := exec.Command("ps", "-ww", "-o", "args=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		testutil.RequireOrSkip(t, "ps -p %d: %v", pid, err)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("ps -o args = %q; want %q", got, want)
	}
	out, err = exec.Command(python, "-c", "import json, sys, psutil; print(json.dumps(psutil.Process(int(sys.argv[1])).cmdline()))",
		strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		testutil.RequireOrSkip(t, "psutil (apt-get install python3-psutil): %v: %s", err, out)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil || !slices.Equal(got, argv) {
		t.Errorf("psutil's cmdline() = %s; want %q", out, argv)
	}
}

// pgrep is the pids pgrep -f lists for pattern.
func pgrep(t *testing.T, pattern string) []int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", pattern).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil // none
	}
	if err != nil {
		testutil.RequireOrSkip(t, "pgrep -f: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// _retitle run by itself in a Python whose argument area is short (its
// argv, a few hundred bytes): a title that fits is the whole command line,
// one longer is cut ending in "...", the environment after the area is
// never touched, and where /proc/self/mem cannot be opened the command
// line stays as it was. Nothing is said on stdout or stderr.
func TestRetitle(t *testing.T) {
	requirePython(t)
	script := filepath.Join(t.TempDir(), "spare.py")
	testutil.NoErr(t, os.WriteFile(script, []byte(program), 0o644))
	const code = `import json, os, sys
g = {"__name__": "retitle"}
exec(open(sys.argv[1]).read(), g)
g["_retitle"](["title", "x" * int(sys.argv[2])], *sys.argv[3:])
with open("/proc/self/cmdline", "rb") as c, open("/proc/self/environ", "rb") as e:
    os.write(3, json.dumps([c.read().decode(), e.read().decode()]).encode())`
	run := func(n int, mem ...string) (argv []string, cmdline, environ, said string) {
		argv = append([]string{python, "-c", code, script, fmt.Sprintf("%05d", n)}, mem...)
		r, w, err := os.Pipe()
		testutil.NoErr(t, err)
		defer r.Close()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"A=1", "B=2"}
		cmd.ExtraFiles = []*os.File{w}
		out, err := cmd.CombinedOutput() // reaped: Wait
		w.Close()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var got [2]string
		if err := json.NewDecoder(r).Decode(&got); err != nil {
			t.Fatal(err)
		}
		return argv, got[0], got[1], string(out)
	}
	// The area: argv, each NUL-terminated; the mem argument changes it.
	area := 0
	for _, a := range []string{python, "-c", code, script, "00000"} {
		area += len(a) + 1
	}
	most := area - 2 - len("title ") // a NUL after the title, and the area's last byte
	for _, tc := range []struct {
		name string
		n    int
		mem  []string
		want func(argv []string) string
	}{
		{"fits", 10, nil, func([]string) string { return "title " + strings.Repeat("x", 10) }},
		{"fills the area", most, nil, func([]string) string { return "title " + strings.Repeat("x", most) }},
		{"one byte too long", most + 1, nil, func([]string) string { return "title " + strings.Repeat("x", most-3) + "..." }},
		{"far too long", 10000, nil, func([]string) string { return "title " + strings.Repeat("x", most-3) + "..." }},
		{"no /proc/self/mem", 10, []string{"/nonexistent/mem"},
			func(argv []string) string { return strings.Join(argv, "\x00") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, cmdline, environ, said := run(tc.n, tc.mem...)
			if want := tc.want(argv); strings.TrimSuffix(cmdline, "\x00") != want {
				t.Errorf("cmdline = %q; want %q", cmdline, want)
			}
			if environ != "A=1\x00B=2\x00" {
				t.Errorf("environ = %q: the title overflowed its area", environ)
			}
			if said != "" {
				t.Errorf("_retitle said %q", said)
			}
		})
	}
}
