//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// openPty returns a pseudo-terminal's master and its terminal end.
func openPty(t *testing.T) (master, tty *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	testutil.NoErr(t, err)
	master = os.NewFile(uintptr(fd), "ptmx")
	testutil.NoErr(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	testutil.NoErr(t, err)
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	testutil.NoErr(t, err)
	t.Cleanup(func() { master.Close(); tty.Close() })
	return master, tty
}

// In a terminal (jupyter console, a kernel started by hand) the supervisor
// says only what is wrong, unless a log level is asked for; the server's
// log (not a terminal) keeps its lifecycle lines.
func TestRunIsQuietInATerminal(t *testing.T) {
	bin := buildInstallTestBinary(t)
	for _, c := range []struct {
		name  string
		env   []string
		quiet bool
	}{
		{"default", nil, true},
		{"asked for info", []string{"TFGPU_LOG_LEVEL=info"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			master, tty := openPty(t)
			const kernelID = "5b2c1e7a-aaaa-4bbb-8ccc-0000000000a7" // one a record is written for
			conn := writeTCPConn(t, t.TempDir(), kernelID, "tty-key")
			cmd := exec.Command(bin, "run", "--cgroup", "proc", "-f", conn, "--", "/bin/sleep", "600")
			state := testutil.PrivateDir(t)
			cmd.Env = append(os.Environ(), append([]string{"TFGPU_STATE_DIR=" + state}, c.env...)...)
			cmd.Stdout, cmd.Stderr = tty, tty
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			testutil.NoErr(t, cmd.Start())
			tty.Close()
			var out bytes.Buffer
			copied := make(chan struct{})
			go func() { io.Copy(&out, master); close(copied) }()
			// The kernel has started once its record is written (just
			// before the "kernel started" line; /bin/sleep never answers,
			// so it stays "starting"): a quiet terminal is then quiet
			// through a whole start, not a SIGTERM before it.
			testutil.WaitFor(t, 20*time.Second, "the kernel's record", func() bool {
				var st record.State
				b, err := os.ReadFile(filepath.Join(state, kernelID+".json"))
				return err == nil && json.Unmarshal(b, &st) == nil && st.KernelPID > 0
			})
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
				t.Fatal("the supervisor did not stop on SIGTERM")
			}
			master.SetReadDeadline(time.Now().Add(time.Second))
			<-copied
			text := out.String()
			switch {
			case c.quiet && strings.Contains(text, "level=INFO"):
				t.Errorf("info lines in the terminal:\n%s", text)
			case !c.quiet && !strings.Contains(text, "kernel started"):
				t.Errorf("asked for info, the terminal got no lifecycle line:\n%s", text)
			}
		})
	}
}
