package wrapper

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// longDir is a directory whose path leaves no room for a unix socket.
func longDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), strings.Repeat("x", 60), strings.Repeat("y", 60))
	testutil.NoErr(t, os.MkdirAll(d, 0o700))
	return d
}

// Issue 22, D: with CurveZMQ asked for, the kernel's own sockets are never
// plaintext TCP: a too-long runtime directory or TMPDIR moves them to a
// short private directory, and where none is short, or tcp is asked for,
// the supervisor refuses. Without CURVE, a short directory is still
// preferred to TCP.
func TestInnerTransportIsNeverPlaintextWithCurve(t *testing.T) {
	ci := &jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1", Ports: [5]int{1, 2, 3, 4, 5}, Key: "k", SignatureScheme: "hmac-sha256"}
	long := longDir(t)
	t.Setenv("XDG_RUNTIME_DIR", long)
	t.Setenv("TMPDIR", long)
	short := t.TempDir()
	old := shortTmp
	defer func() { shortTmp = old }()
	for _, tc := range []struct {
		name, transport string
		curve, allLong  bool
		want            string // "ipc", "tcp" or an error's text
	}{
		{"auto, long runtime dir, CURVE: a short private dir", "auto", true, false, "ipc"},
		{"auto, long runtime dir: a short private dir before tcp", "auto", false, false, "ipc"},
		{"ipc", "ipc", false, false, "ipc"},
		{"tcp asked for", "tcp", false, false, "tcp"},
		{"tcp asked for, CURVE", "tcp", true, false, "--inner-transport tcp: the connection file asks for CurveZMQ"},
		{"auto, nothing short, CURVE", "auto", true, true, "no private directory short enough for a unix socket"},
		{"auto, nothing short", "auto", false, true, "tcp"},
		{"ipc, nothing short", "ipc", false, true, "--inner-transport ipc: no private directory short enough"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shortTmp = short
			if tc.allLong {
				shortTmp = longDir(t)
			}
			inner, dir, err := writeInner(ci, "5b2c1e7a-0000", tc.transport, tc.curve)
			if dir != "" {
				defer os.RemoveAll(dir)
			}
			switch tc.want {
			case "ipc", "tcp":
				if err != nil || inner.Transport != tc.want {
					t.Fatalf("writeInner = %+v, %v; want %s", inner, err, tc.want)
				}
				if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("inner directory %s: %v", dir, err)
				}
				if tc.want == "ipc" && (len(inner.IP) > maxIPCPath || !strings.HasPrefix(inner.IP, short)) {
					t.Errorf("ipc path %q: want one under %s, at most %d bytes", inner.IP, short, maxIPCPath)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("writeInner = %+v, %v; want an error with %q", inner, err, tc.want)
				}
				if tc.curve && !errors.Is(err, ErrPlaintextInner) {
					t.Errorf("not ErrPlaintextInner: %v", err)
				}
				if dir != "" {
					t.Errorf("a refused inner transport left %s", dir)
				}
			}
		})
	}

	// The supervisor: exit 2, one line, nothing started.
	path, _ := writeConn(t, t.TempDir())
	data, _ := os.ReadFile(path)
	pub, sec := curvePair(t)
	curved := filepath.Join(filepath.Dir(path), "kernel-curve-1.json")
	os.WriteFile(curved, []byte(strings.Replace(string(data), "{", `{"curve_publickey": "`+pub+`", "curve_secretkey": "`+sec+`",`, 1)), 0o600)
	var stderr testutil.Buffer
	code := Run(t.Context(), Config{ConnFile: curved, Argv: []string{"/bin/false"}, Stderr: &stderr, Log: discardLogger(),
		InnerTransport: "tcp", StateDir: testutil.PrivateDir(t)})
	if out := stderr.String(); code != ExitUsage || strings.Count(out, "\n") != 1 || !strings.Contains(out, "plain text on 127.0.0.1") {
		t.Fatalf("a CURVE kernel with --inner-transport tcp: exit %d, stderr %q", code, out)
	}
}
