package zmtp

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	if err != nil {
		t.Fatal(err)
	}
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
				if err != nil {
					t.Fatal(err)
				}
				return c
			}

			own, err := net.Dial(network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
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
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
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
