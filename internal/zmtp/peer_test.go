package zmtp

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// TestPeerUID: the owner of a connection's other end, for TCP (sock_diag)
// and unix sockets (SO_PEERCRED), from this process and from a real other
// user.
func TestPeerUID(t *testing.T) {
	other := testutil.NewUser(t, "peer", nil)
	dir, err := os.MkdirTemp("", "tfgpu-peer-") // t.TempDir's parent is root's alone
	testutil.NoErr(t, err)
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	for _, network := range []string{"tcp4", "tcp6", "unix"} {
		t.Run(network, func(t *testing.T) {
			addr := map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0", "unix": filepath.Join(dir, "s")}[network]
			ln, err := net.Listen(network, addr)
			if err != nil {
				if network == "tcp6" {
					testutil.RequireOrSkip(t, "no IPv6 loopback: %v", err)
				}
				t.Fatal(err)
			}
			defer ln.Close()
			if network == "unix" {
				os.Chmod(addr, 0o777)
			}
			accept := func() net.Conn {
				t.Helper()
				ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(time.Now().Add(10 * time.Second))
				c, err := ln.Accept()
				testutil.NoErr(t, err)
				return c
			}

			own, err := net.Dial(network, ln.Addr().String())
			testutil.NoErr(t, err)
			defer own.Close()
			c := accept()
			if uid, err := PeerUID(c); err != nil || uid != os.Geteuid() {
				t.Errorf("this process's connection: uid %d, %v; want %d", uid, err, os.Geteuid())
			}
			c.Close()

			// The other user's: a Python that connects and waits.
			var py string
			switch network {
			case "unix":
				py = fmt.Sprintf("s = socket.socket(socket.AF_UNIX); s.connect(%q)", addr)
			default:
				ta := ln.Addr().(*net.TCPAddr)
				py = fmt.Sprintf("s = socket.create_connection((%q, %d))", ta.IP.String(), ta.Port)
			}
			cmd := exec.Command("/usr/bin/python3", "-c", "import socket, sys\n"+py+"\nsys.stdin.read()")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: other.Cred}
			stdin, _ := cmd.StdinPipe()
			testutil.NoErr(t, cmd.Start())
			defer func() { stdin.Close(); cmd.Wait() }()
			c = accept()
			defer c.Close()
			if uid, err := PeerUID(c); err != nil || uid != other.UID {
				t.Errorf("%s's connection: uid %d, %v; want %d", other.Name, uid, err, other.UID)
			}
			if p := peerOf(c); p.key != fmt.Sprintf("uid:%d", other.UID) {
				t.Errorf("peerOf = %+v, want key uid:%d", p, other.UID)
			}
		})
	}
}

// Attack D's second half: the kernel's inner TCP port is chosen free and
// bound by the kernel a moment later; another user who binds it first
// gets nothing from the relay: the link refuses the connection before
// anything is sent. The kernel's own (this user's) port is taken.
func TestLinkRefusesAPortOfAnotherUser(t *testing.T) {
	other := testutil.NewUser(t, "squat", nil)
	cmd := exec.Command("/usr/bin/python3", "-c", `import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
got = c.recv(100)
print(len(got), flush=True)
`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: other.Cred}
	out := &testutil.Buffer{}
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = out
	testutil.NoErr(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var port int
	if _, err := fmt.Fscan(stdout, &port); err != nil {
		t.Fatalf("the squatter's port: %v %s", err, out.String())
	}
	tr := dialTransport{network: "tcp", link: NewLink(context.Background(), "kernel's shell")}
	_, err := tr.Dial(context.Background(), &net.Dialer{}, fmt.Sprintf("127.0.0.1:%d", port))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("held by uid %d", other.UID)) {
		t.Fatalf("dialing another user's port: %v", err)
	}
	t.Logf("refused: %v", err)
	// The squatter's accept returns with nothing received: the relay sent
	// no byte (not even its greeting) before closing.
	var n int
	if _, err := fmt.Fscan(stdout, &n); err != nil || n != 0 {
		t.Fatalf("the squatter received %d bytes (%v)", n, err)
	}

	own, err := net.Listen("tcp", "127.0.0.1:0")
	testutil.NoErr(t, err)
	defer own.Close()
	c, err := tr.Dial(context.Background(), &net.Dialer{}, own.Addr().String())
	if err != nil {
		t.Fatalf("dialing this user's own port: %v", err)
	}
	c.Close()
}
