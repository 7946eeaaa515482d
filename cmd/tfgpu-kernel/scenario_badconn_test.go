//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Item 8: bad connection files. `tfgpu-kernel run` is started directly, as
// the kernelspec's argv would start it; each case must exit 2 with exactly
// one line on stderr that names the file and the problem, and leave no
// process (no kernel is started).
func TestE2EBadConnectionFile(t *testing.T) {
	s := e2eSetup(t)
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		testutil.NoErr(t, err)
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	conn := func(edit func(map[string]any)) []byte {
		c := map[string]any{
			"shell_port": free(), "iopub_port": free(), "stdin_port": free(), "control_port": free(), "hb_port": free(),
			"ip": "127.0.0.1", "key": "8b4a1b67-0f6e-4a5e-9d0f-4a0e0f5b7c1d", "transport": "tcp",
			"signature_scheme": "hmac-sha256", "kernel_name": "tfgpu",
		}
		if edit != nil {
			edit(c)
		}
		b, _ := json.Marshal(c)
		return b
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	testutil.NoErr(t, err)
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	for _, tc := range []struct {
		name    string
		content []byte // nil: the file does not exist
		problem string // regexp (case-insensitive) the line must match besides the path
	}{
		{"missing", nil, `no such file|does not exist|not exist|cannot open|can't open|not found`},
		{"not-json", []byte("this is {not json"), `json|invalid character|syntax|parse`},
		{"no-shell-port", conn(func(c map[string]any) { delete(c, "shell_port") }), `shell_port`},
		{"bad-scheme", conn(func(c map[string]any) { c["signature_scheme"] = "hmac-foo" }), `hmac-foo`},
		{"port-in-use", conn(func(c map[string]any) { c["shell_port"] = busyPort }), fmt.Sprintf(`in use|%d`, busyPort)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kernel-e2e-"+tc.name+".json")
			if tc.content != nil {
				testutil.NoErr(t, os.WriteFile(path, tc.content, 0o600))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			tag, xdg := e2eTag(t), e2eXDG(t)
			cmd := exec.CommandContext(ctx, s.bin, "run", "-f", path, "--", s.python, "-m", "ipykernel_launcher", "-f", path)
			cmd.Env = append(append([]string{}, s.env...), "E2E_TAG="+tag, "XDG_RUNTIME_DIR="+xdg)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 5 * time.Second
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			s.checkSurvivors(t, tag, nil, time.Now())
			s.checkLeftovers(t, xdg, false)
			if ctx.Err() != nil {
				t.Fatalf("still running after 20 s; stderr:\n%s", stderr.String())
			}
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("run: %v", err)
			}
			msg := strings.TrimRight(stderr.String(), "\n")
			t.Logf("exit %d after %v; stderr: %q", code, took.Round(time.Millisecond), msg)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if msg == "" || strings.Contains(msg, "\n") {
				t.Errorf("want exactly one line on stderr, got %d:\n%s", strings.Count(msg, "\n")+1, msg)
			}
			if !strings.Contains(msg, path) {
				t.Errorf("stderr does not name the file %s: %q", path, msg)
			}
			if !regexp.MustCompile(`(?i)` + tc.problem).MatchString(msg) {
				t.Errorf("stderr does not name the problem (/%s/): %q", tc.problem, msg)
			}
			if stdout.Len() > 0 {
				t.Errorf("unexpected stdout: %q", stdout.String())
			}
		})
	}
}
