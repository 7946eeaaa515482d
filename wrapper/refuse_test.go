package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// A supervisor given a Refusal (run's settings are bad) starts no kernel
// but answers as one that is ready: kernel_info (with the line as its
// banner), every cell with an error reply naming the setting and the line
// on its stderr (and a count, as a kernel's), any other request that needs a kernel with the same
// error, an interrupt; a shutdown_request is answered and Run returns 0.
// Its argv is the fake kernel's: were a kernel started, the cell would be
// echoed instead of refused.
func TestRefusingSupervisorAnswersEveryCellWithTheSettingsError(t *testing.T) {
	const line = `TFGPU_CONFIRM_TIMEOUT="5": want a duration such as 1.5s, 500ms or 2h`
	h := newHarness(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	lg := slog.New(slog.NewTextHandler(h.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := Config{ConnFile: h.path, Argv: []string{os.Args[0], "-test.run=^$", "-f", h.path}, Refusal: line, Log: lg, Stderr: h.stderr}
	go func() { h.done <- Run(ctx, cfg) }()
	t.Cleanup(h.close)
	h.dial()

	// kernel_info, until the shell connection is up.
	h.awaitKernelInfo("no kernel_info_reply")
	h.send(h.shell, "kernel_info_request", nil, map[string]any{})
	typ, info := h.reply(h.shell, 5*time.Second)
	if banner, _ := info["banner"].(string); typ != "kernel_info_reply" || info["status"] != "ok" || !strings.Contains(banner, line) {
		t.Fatalf("kernel_info: %s %v; want an ok kernel_info_reply whose banner says %q", typ, info, line)
	}

	// Cells, until iopub's subscription is in place and one's stderr
	// arrives: every one of them is refused.
	refused := func(what string, typ string, c map[string]any) {
		t.Helper()
		if c["status"] != "error" || c["ename"] != SettingsErrorName || c["evalue"] != line {
			t.Fatalf("%s: %s %v; want status error, ename %s, evalue %q", what, typ, c, SettingsErrorName, line)
		}
	}
	var stderr string
	for n := 1; stderr == ""; n++ {
		if n > 60 {
			t.Fatalf("no cell's stderr on iopub after %d cells; log:\n%s", n, h.stderr)
		}
		sent := h.execute("print(1)", nil)
		typ, c := h.reply(h.shell, 5*time.Second)
		if typ != "execute_reply" {
			t.Fatalf("cell %d: got %s", n, typ)
		}
		refused("a cell", typ, c)
		stderr = h.streamOf(sent, 300*time.Millisecond)
	}
	if !strings.HasPrefix(stderr, "tfgpu-kernel: "+line+"\n") || !strings.Contains(stderr, "No kernel was started") {
		t.Errorf("the cell's stderr: %q; want the line, then that no kernel was started", stderr)
	}
	// The harness's cells store no history; a client's do, and its
	// prompt counts them (jupyter console does arithmetic on the count).
	for want := 1.0; want <= 2; want++ {
		h.send(h.shell, "execute_request", nil, map[string]any{"code": "1", "silent": false, "store_history": true,
			"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true})
		typ, c := h.reply(h.shell, 5*time.Second)
		refused("a cell that stores history", typ, c)
		if c["execution_count"] != want {
			t.Fatalf("execution_count %v; want %v, one more for each cell that stores history", c["execution_count"], want)
		}
	}
	h.send(h.shell, "complete_request", nil, map[string]any{"code": "pri", "cursor_pos": 3})
	typ, c := h.reply(h.shell, 5*time.Second)
	if typ != "complete_reply" {
		t.Fatalf("complete_request: got %s", typ)
	}
	refused("complete_request", typ, c)
	h.send(h.control, "interrupt_request", nil, map[string]any{})
	if typ, c := h.reply(h.control, 5*time.Second); typ != "interrupt_reply" || c["status"] != "ok" {
		t.Fatalf("interrupt_request: %s %v", typ, c)
	}

	h.send(h.control, "shutdown_request", nil, map[string]any{"restart": true})
	if typ, c := h.reply(h.control, 5*time.Second); typ != "shutdown_reply" || c["restart"] != true {
		t.Fatalf("shutdown_request: %s %v", typ, c)
	}
	if code := h.exitCode(10 * time.Second); code != ExitOK {
		t.Fatalf("exit code %d after shutdown, want 0; log:\n%s", code, h.stderr)
	}
}

// With a connection file it cannot use, a supervisor given a Refusal
// exits 2 with one line naming the file, as any run does.
func TestRefusingSupervisorWithoutAConnectionFile(t *testing.T) {
	var stderr bytes.Buffer
	missing := filepath.Join(t.TempDir(), "kernel-gone.json")
	code := Run(context.Background(), Config{ConnFile: missing, Refusal: `TFGPU_CGROUP "v3": want auto, v2, systemd, v1 or proc`,
		Log: discardLogger(), Stderr: &stderr})
	out := stderr.String()
	if code != ExitUsage || strings.Count(out, "\n") != 1 || !strings.Contains(out, missing) {
		t.Fatalf("exit %d, stderr %q; want 2 and one line naming %s", code, out, missing)
	}
}

// streamOf returns the text of the stderr stream on iopub whose parent is
// the request sent, "" when none comes within d (other messages are
// consumed).
func (h *harness) streamOf(sent [][]byte, d time.Duration) string {
	p, err := jmsg.Split(sent)
	testutil.NoErr(h.t, err)
	id, err := jmsg.Header(p.Header)
	testutil.NoErr(h.t, err)
	deadline := time.After(d)
	for {
		select {
		case m := <-h.iopubMsgs:
			mp, err := jmsg.Split(m.Frames)
			if err != nil {
				continue
			}
			if t, _ := jmsg.MsgType(mp.Header); t != "stream" {
				continue
			}
			if parent, err := jmsg.Header(mp.Parent); err != nil || parent.MsgID != id.MsgID {
				continue
			}
			var c struct{ Name, Text string }
			if json.Unmarshal(mp.Content, &c) == nil && c.Name == "stderr" {
				return c.Text
			}
		case <-deadline:
			return ""
		}
	}
}
