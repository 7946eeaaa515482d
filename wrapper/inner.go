package wrapper

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// innerConnName is the inner connection file's name inside its directory.
const innerConnName = "kernel.json"

// substituteConn replaces every argument naming Jupyter's connection file
// with the inner one (docs/design.md#start).
func substituteConn(argv []string, conn, inner string) []string {
	abs, _ := filepath.Abs(conn)
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == conn || (abs != "" && a == abs) {
			a = inner
		}
		out[i] = a
	}
	return out
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// maxIPCPath keeps ipc paths under sun_path's 108 bytes with room for the
// "-N" port suffix.
const maxIPCPath = 100

// writeInner creates the private directory (0700) and the inner connection
// file (0600, same key and scheme as Jupyter's, so frames pass untouched).
// Endpoints are ipc sockets in that directory, reachable only by this user;
// when the path would be too long for a unix socket, or tcp is asked for,
// they are tcp ports on 127.0.0.1.
func writeInner(ci *jmsg.ConnInfo, id, transport string) (*jmsg.ConnInfo, string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if fi, err := os.Stat(base); base == "" || err != nil || !fi.IsDir() {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "tfgpu-"+record.ShortID(id)+"-")
	if err != nil {
		return nil, "", fmt.Errorf("create inner directory: %w", err)
	}
	inner := *ci
	inner.Extra = nil
	ip := filepath.Join(dir, "k")
	switch {
	case transport == "tcp" || (transport != "ipc" && len(ip) > maxIPCPath):
		inner.Transport, inner.IP = "tcp", "127.0.0.1"
		for i := range inner.Ports {
			p, err := freePort()
			if err != nil {
				os.RemoveAll(dir)
				return nil, "", err
			}
			inner.Ports[i] = p
		}
	default:
		inner.Transport, inner.IP = "ipc", ip
		for i := range inner.Ports {
			inner.Ports[i] = i + 1
		}
	}
	if err := jmsg.WriteFile(filepath.Join(dir, innerConnName), &inner); err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("write inner connection file: %w", err)
	}
	return &inner, dir, nil
}

// freePort asks the kernel for a free loopback port. The port is free when
// returned; ipykernel binds it a moment later (the same race jupyter_client
// accepts when it writes connection files).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
