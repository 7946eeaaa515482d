package wrapper

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// unixPair is a connected pair of unix sockets of this process.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	testutil.NoErr(t, err)
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		testutil.NoErr(t, err)
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// A standby takes a request only for exactly its connection file, argv
// and environment, from its own uid, well-formed and bounded; a refusal
// names what differs, never an environment variable's value.
func TestReadAdoptionRefuses(t *testing.T) {
	s := &supervisor{cfg: Config{ConnFile: "/home/u/kernel-a.json",
		Argv: []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/home/u/kernel-a.json"}}}
	good := adoptRequest{ConnFile: s.cfg.ConnFile, Argv: s.cfg.Argv, Env: os.Environ(), Cwd: "/"}
	for _, tc := range []struct {
		name string
		req  func(r *adoptRequest) []byte
		want string // "" : taken
	}{
		{"the same", nil, ""},
		{"another connection file", func(r *adoptRequest) []byte { r.ConnFile = "/home/u/kernel-b.json"; return nil }, "for connection file"},
		{"another argv", func(r *adoptRequest) []byte { r.Argv = append(r.Argv[:3:3], "--matplotlib=inline"); return nil }, "command changed"},
		{"a changed variable", func(r *adoptRequest) []byte {
			r.Env = append(append([]string{}, r.Env...), "TFGPU_TEST_SECRET=hunter2")
			return nil
		}, "TFGPU_TEST_SECRET"},
		{"a relative working directory", func(r *adoptRequest) []byte { r.Cwd = "x"; return nil }, "working directory"},
		{"not JSON", func(*adoptRequest) []byte { return []byte("{ok\n") }, "unreadable"},
		{"over the size bound", func(*adoptRequest) []byte {
			return []byte(`{"env":["` + strings.Repeat("A", maxAdoptRequest) + `"]}` + "\n")
		}, "unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := unixPair(t)
			r := good
			var raw []byte
			if tc.req != nil {
				raw = tc.req(&r)
			}
			if raw == nil {
				raw, _ = json.Marshal(r)
				raw = append(raw, '\n')
			}
			go func() { a.Write(raw); a.CloseWrite() }()
			got, err := readAdoption(b, s.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && got.Cwd != "/":
				t.Fatalf("took %+v", got)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "hunter2"):
				t.Fatalf("the refusal names a value: %v", err)
			}
		})
	}
}
