package wrapper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/place"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil/fakesystemd"
)

// The test binary plays a small Jupyter kernel written in Go when
// TFGPU_FAKE_KERNEL is set (os/exec's helper-process pattern). It speaks
// just enough of the protocol to test the relay without Python:
//
//	kernel_info_request → kernel_info_reply
//	execute_request     → iopub stream with the code, then execute_reply
//	                      whose content carries the sha256 of the frames
//	                      it received (after the delimiter), so tests check
//	                      byte-for-byte relaying;
//	  code "input"      → input_request on stdin to the shell identities,
//	                      and the answer echoed on iopub;
//	  code "flood N"    → N stream messages of 8 KiB on iopub;
//	  code "exit N"     → os.Exit(N) without replying;
//	  code "spawn"      → starts a setsid'd grandchild sleeping forever and
//	                      prints its pid on iopub;
//	  code "hold DEV MIB" → holds fake GPU DEV with MIB (gputest) for life;
//	  code "error E: V" → an error message with ename E and evalue V;
//	  code "env NAME"   → the variable's value on iopub, "(unset)" if unset;
//	usage_request       → usage_reply with hostname, pid and cpu_count only
//	                      (ipykernel 7 without psutil);
//	shutdown_request    → shutdown_reply, exit 0 (unless the signature is bad,
//	                      then it is ignored, as ipykernel does).
//	hb                  → echoed.
func TestMain(m *testing.M) {
	// The test binary as systemd-run (systemd_test.go).
	fakesystemd.Main()
	if len(os.Args) > 1 && os.Args[1] == WatchCommand { // the watcher of a supervisor run by this binary (watcher.go)
		os.Exit(Watch(os.Stdin, os.Stderr))
	}
	if path := os.Getenv("TFGPU_TEST_SUPERVISOR"); path != "" {
		// The supervisor as a process of its own (startExternal).
		os.Unsetenv("TFGPU_TEST_SUPERVISOR")
		lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		limit, _ := bytesize.Parse(os.Getenv("TFGPU_MEMORY_LIMIT"))
		confirm, _ := time.ParseDuration(os.Getenv("TFGPU_CONFIRM_TIMEOUT"))
		var gpus *place.Spec
		if spec, on, err := place.Parse(os.Getenv("TFGPU_GPUS")); on && err == nil {
			gpus = &spec
		}
		os.Exit(Run(context.Background(), Config{ConnFile: path, Cgroup: os.Getenv("TFGPU_CGROUP"), MemoryLimit: limit,
			NVMLLibrary: os.Getenv("TFGPU_NVML_LIBRARY"), ConfirmTimeout: confirm, GPUs: gpus,
			Argv: []string{os.Args[0], "-test.run=^$", "-f", path}, Log: lg}))
	}
	if os.Getenv("TFGPU_FAKE_KERNEL") != "" {
		os.Exit(fakeKernel(os.Args[len(os.Args)-1]))
	}
	if os.Getenv("TFGPU_FAKE_SLEEPER") != "" {
		// A grandchild that escaped with setsid and ignores SIGTERM.
		signalIgnore()
		time.Sleep(time.Hour)
		return
	}
	// Nothing of the host's may change an outcome: its Jupyter and
	// IPython directories (the real kernels some tests start read them),
	// and Jupyter's, XDG's, Slurm's and TFGPU_ variables of the shell that
	// runs go test (docs/testing.md#hermetic).
	testutil.Hermetic(testutil.HostJupyterDirs(), nil)
	os.Exit(m.Run())
}

func fakeKernel(connPath string) int {
	if d, err := time.ParseDuration(os.Getenv("TFGPU_FAKE_DELAY")); err == nil {
		time.Sleep(d) // a kernel still starting: Go's default SIGINT action kills it
	}
	ci, err := jmsg.Load(connPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake kernel:", err)
		return 2
	}
	if f := os.Getenv("TFGPU_FAKE_SPAWN_FILE"); f != "" {
		// A setsid'd escapee from the start, its pid appended to f.
		pid := spawnSleeper()
		out, _ := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		fmt.Fprintln(out, pid)
		out.Close()
	}
	signer, _ := jmsg.NewSigner(ci.SignatureScheme, ci.Key)
	ctx := context.Background()
	var socks [5]zmq4.Socket
	for _, ch := range jmsg.Channels {
		if ch == jmsg.IOPub {
			socks[ch] = zmq4.NewPub(ctx)
		} else {
			socks[ch] = zmq4.NewRouter(ctx)
		}
		if err := socks[ch].Listen(ci.Endpoint(ch)); err != nil {
			fmt.Fprintln(os.Stderr, "fake kernel listen:", err)
			return 2
		}
	}
	go func() { // heartbeat: echo
		for {
			m, err := socks[jmsg.HB].Recv()
			if err != nil {
				return
			}
			_ = socks[jmsg.HB].SendMulti(m)
		}
	}()
	send := func(ch jmsg.Channel, idents [][]byte, typ string, parent []byte, content any) {
		frames, err := jmsg.NewMessage(signer, idents, typ, parent, "fake-kernel", content)
		if err != nil {
			panic(err)
		}
		_ = socks[ch].SendMulti(zmq4.NewMsgFrom(frames...))
	}
	topic := func(t string) [][]byte { return [][]byte{[]byte("kernel.fake." + t)} }
	control := make(chan zmq4.Msg)
	go func() {
		for {
			m, err := socks[jmsg.Control].Recv()
			if err != nil {
				return
			}
			control <- m
		}
	}()
	shell := make(chan zmq4.Msg)
	go func() {
		for {
			m, err := socks[jmsg.Shell].Recv()
			if err != nil {
				return
			}
			shell <- m
		}
	}()
	var heldDevices []*os.File // fake GPUs held ("hold"), open for the kernel's life
	defer func() {
		for _, f := range heldDevices {
			f.Close()
		}
	}()
	for {
		var m zmq4.Msg
		var onControl bool
		select {
		case m = <-control:
			onControl = true
		case m = <-shell:
		}
		p, err := jmsg.Split(m.Frames)
		if err != nil || !signer.Verify(p) {
			continue // ipykernel drops messages with bad signatures
		}
		h, _ := jmsg.Header(p.Header)
		ch := jmsg.Shell
		if onControl {
			ch = jmsg.Control
		}
		switch h.MsgType {
		case "kernel_info_request": // between busy and idle, as ipykernel answers every request
			send(jmsg.IOPub, topic("status"), "status", p.Header, map[string]any{"execution_state": "busy"})
			send(ch, p.Idents, "kernel_info_reply", p.Header, map[string]any{"status": "ok",
				"protocol_version": "5.3", "implementation": "fake", "language_info": map[string]any{"name": "python"}})
			send(jmsg.IOPub, topic("status"), "status", p.Header, map[string]any{"execution_state": "idle"})
		case "usage_request": // as ipykernel 7 without psutil answers
			send(ch, p.Idents, "usage_reply", p.Header, map[string]any{"hostname": "fake-host", "pid": os.Getpid(), "cpu_count": 1})
		case "shutdown_request":
			send(ch, p.Idents, "shutdown_reply", p.Header, map[string]any{"status": "ok", "restart": false})
			time.Sleep(50 * time.Millisecond)
			return 0
		case "execute_request":
			var c struct{ Code string }
			_ = json.Unmarshal(p.Content, &c)
			send(jmsg.IOPub, topic("status"), "status", p.Header, map[string]any{"execution_state": "busy"})
			var n int
			switch {
			case c.Code == "input":
				send(jmsg.Stdin, p.Idents, "input_request", p.Header, map[string]any{"prompt": "? ", "password": false})
				r, err := socks[jmsg.Stdin].Recv()
				if err == nil {
					rp, _ := jmsg.Split(r.Frames)
					var in struct{ Value string }
					_ = json.Unmarshal(rp.Content, &in)
					send(jmsg.IOPub, topic("stream"), "stream", p.Header, map[string]any{"name": "stdout", "text": "got " + in.Value})
				}
			case strings.HasPrefix(c.Code, "exit "):
				fmt.Sscan(strings.TrimPrefix(c.Code, "exit "), &n)
				os.Exit(n)
			case strings.HasPrefix(c.Code, "flood "):
				fmt.Sscan(strings.TrimPrefix(c.Code, "flood "), &n)
				text := strings.Repeat("x", 8192)
				for i := 0; i < n; i++ {
					send(jmsg.IOPub, topic("stream"), "stream", p.Header, map[string]any{"name": "stdout", "text": text})
				}
			case strings.HasPrefix(c.Code, "hold "):
				// Holds fake GPU N with MIB registered, as holder.py does
				// (internal/gpu/gputest), for the kernel's life.
				var dev, mib int
				fmt.Sscan(strings.TrimPrefix(c.Code, "hold "), &dev, &mib)
				root := os.Getenv("FAKE_NVML_ROOT")
				held, err := os.OpenFile(filepath.Join(root, fmt.Sprintf("nvidia%d", dev)), os.O_RDWR, 0)
				if err == nil {
					heldDevices = append(heldDevices, held)
					err = os.WriteFile(filepath.Join(root, "ctx", fmt.Sprintf("%d.%d", os.Getpid(), dev)), []byte(fmt.Sprint(mib<<20)), 0o644)
				}
				send(jmsg.IOPub, topic("stream"), "stream", p.Header, map[string]any{"name": "stdout", "text": fmt.Sprint("held ", err)})
			case strings.HasPrefix(c.Code, "error "):
				// An error as ipykernel publishes one: ename, evalue and
				// a traceback with IPython's colours.
				ename, evalue, _ := strings.Cut(strings.TrimPrefix(c.Code, "error "), ": ")
				send(jmsg.IOPub, topic("error"), "error", p.Header, map[string]any{"ename": ename, "evalue": evalue,
					"traceback": []string{"\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
						"\x1b[0;31m" + ename + "\x1b[0m: " + evalue}})
				send(jmsg.Shell, p.Idents, "execute_reply", p.Header, map[string]any{"status": "error",
					"execution_count": 1, "ename": ename, "evalue": evalue, "traceback": []string{}})
				send(jmsg.IOPub, topic("status"), "status", p.Header, map[string]any{"execution_state": "idle"})
				continue
			case strings.HasPrefix(c.Code, "env "):
				v, ok := os.LookupEnv(strings.TrimPrefix(c.Code, "env "))
				if !ok {
					v = "(unset)"
				}
				send(jmsg.IOPub, topic("stream"), "stream", p.Header, map[string]any{"name": "stdout", "text": v})
			case c.Code == "spawn":
				send(jmsg.IOPub, topic("stream"), "stream", p.Header, map[string]any{"name": "stdout", "text": fmt.Sprint(spawnSleeper())})
			default:
				send(jmsg.IOPub, topic("stream"), "stream", p.Header, map[string]any{"name": "stdout", "text": c.Code})
			}
			sum := sha256.New()
			for _, f := range m.Frames[len(p.Idents)+1:] {
				sum.Write(f)
			}
			send(jmsg.Shell, p.Idents, "execute_reply", p.Header, map[string]any{"status": "ok",
				"execution_count": 1, "frames_sha256": hex.EncodeToString(sum.Sum(nil))})
			send(jmsg.IOPub, topic("status"), "status", p.Header, map[string]any{"execution_state": "idle"})
		}
	}
}

// spawnSleeper starts a setsid'd process that ignores SIGTERM and sleeps.
func spawnSleeper() int {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TFGPU_FAKE_KERNEL=", "TFGPU_FAKE_SLEEPER=1", "TFGPU_FAKE_SPAWN_FILE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return -1
	}
	return cmd.Process.Pid
}
