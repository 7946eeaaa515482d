package wrapper

import (
	"bufio"
	"encoding/json"
	"fmt"
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

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/oom"
	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// cellOutput runs code and returns what iopub carried for it, in order,
// until its idle status: "type" or "stream:name:text" per message.
func (h *harness) cellOutput(code string) []string {
	h.t.Helper()
	req, _ := jmsg.Split(h.execute(code, nil))
	want, _ := jmsg.Header(req.Header)
	var out []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-h.iopubMsgs:
			p, err := jmsg.Split(m.Frames)
			if err != nil {
				continue
			}
			if parent, _ := jmsg.Header(p.Parent); parent.MsgID != want.MsgID {
				continue
			}
			typ, _ := jmsg.MsgType(p.Header)
			var c struct {
				Name, Text     string
				ExecutionState string `json:"execution_state"`
			}
			_ = json.Unmarshal(p.Content, &c)
			switch typ {
			case "stream":
				out = append(out, "stream:"+c.Name+":"+c.Text)
			case "status":
				out = append(out, "status:"+c.ExecutionState)
				if c.ExecutionState == "idle" {
					return out
				}
			default:
				out = append(out, typ)
			}
		case <-deadline:
			h.t.Fatalf("cell %q: no idle within 30 s; iopub so far %q; log:\n%s", code, out, h.stderr)
		}
	}
}

// fakeGPU is one fake GPU of 8 GiB (gputest) for the supervisors this
// test starts in processes of their own, with knobs.
func fakeGPU(t *testing.T, knobs ...string) *gputest.Fake {
	f := gputest.New(t, 1, gputest.Full)
	for _, kv := range f.Env(append([]string{"FAKE_NVML_TOTAL_MEM=" + strconv.Itoa(8<<30)}, knobs...)...) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("TFGPU_NVML_LIBRARY", f.Library())
	return f
}

// holdGPU has the fake kernel hold fake GPU dev with mib MiB.
func (h *harness) holdGPU(dev, mib int) {
	h.t.Helper()
	if out := h.cellOutput(fmt.Sprintf("hold %d %d", dev, mib)); !slices.Contains(out, "stream:stdout:held <nil>") {
		h.t.Fatalf("the kernel did not hold fake GPU %d: %q", dev, out)
	}
}

// idleFigure is an idle time in an explanation ("idle 3s;").
var idleFigure = regexp.MustCompile(`idle [0-9dhms]+;`)

// A cell that ends with a GPU out-of-memory error is told who holds the
// GPU, on its stderr right after the error and before its idle; another
// error is left alone; a second error of the same cell is not explained
// twice. Against the fake NVML, with the supervisor in a process of its
// own (one NVML library per process: gputest).
func TestCellOOMExplained(t *testing.T) {
	testutil.Integration(t) // its holders are Python
	f := fakeGPU(t)
	f.Hold(t, 0, 3072) // a process of this user that is no kernel
	theirs := holdAs(t, f, testutil.NewUser(t, "oom", nil), 0, 512)
	// Another kernel of this user, idle in its notebook, holding 2 GiB.
	other := "0c9e8d7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f"
	path, _ := writeConnOf(t, t.TempDir(), other)
	t.Setenv("JPY_SESSION_NAME", "work/train.ipynb") // as jupyter_server gives it: relative to its root
	b, _ := startExternal(t, path)
	b.holdGPU(0, 2048)
	t.Setenv("JPY_SESSION_NAME", "")
	h, _ := startExternal(t, "")
	h.holdGPU(0, 1024)

	out := h.cellOutput("error OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 8 GiB of which 4 GiB is free.")
	want := []string{"status:busy", "error",
		"stream:stderr:PyTorch ran out of GPU memory. Who holds it now, largest first:\n" +
			"GPU0 Fake NVIDIA H200 (GPU-fa4e0000-0000-0000-0000-000000000000): 8 GiB total, 1.5 GiB free\n" +
			"  3 GiB      user root\n" +
			"  2 GiB      your notebook work/train.ipynb (kernel 0c9e8d7f), idle IDLE; free it with: tfgpu-kernel stop " + other + "\n" +
			"  1 GiB      this kernel\n" +
			"  512 MiB    user " + theirs.name + "\n",
		"status:idle"}
	for i := range out { // how long the other kernel has been idle is the clock's
		out[i] = idleFigure.ReplaceAllString(out[i], "idle IDLE;")
	}
	if !slices.Equal(out, want) {
		t.Errorf("an out-of-memory cell's iopub:\n%q\nwant\n%q", out, want)
	}

	if text := strings.Join(out, "\n"); strings.Contains(text, strconv.Itoa(theirs.pid)) || strings.Contains(text, "holder.py") {
		t.Errorf("another user's pid or command shown without --oom-details:\n%s", text)
	}

	out = h.cellOutput("error ValueError: CUDA out of memory, said the user")
	if want := []string{"status:busy", "error", "status:idle"}; !slices.Equal(out, want) {
		t.Errorf("another error's iopub: %q, want %q", out, want)
	}
}

// Without NVML the explanation is one line that says so.
func TestCellOOMWithoutNVML(t *testing.T) {
	missing := filepath.Join(t.TempDir(), gputest.SOName)
	h := startHarnessWith(t, func(c *Config) { c.NVMLLibrary = missing })
	why := gpu.Connect(missing, "").Err() // the file is missing: nothing is loaded here
	if why == nil {
		t.Fatal("NVML opened from a missing file")
	}
	out := h.cellOutput("error OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
	want := []string{"status:busy", "error", "stream:stderr:" + oom.Unavailable(why.Error()), "status:idle"}
	if !slices.Equal(out, want) {
		t.Errorf("iopub: %q\nwant %q", out, want)
	}
}

// Where NVML's pids are not this PID namespace's (a container on a shared
// GPU host: FAKE_NVML_PID_OFFSET), what the kernel holds is told by the
// baseline, as its release is confirmed, and everyone else's memory is one
// figure of processes not visible here.
func TestCellOOMInAnotherPIDNamespace(t *testing.T) {
	f := fakeGPU(t, "FAKE_NVML_PID_OFFSET=4000000")
	f.Hold(t, 0, 3072) // before the kernel starts: in its baseline
	h, _ := startExternal(t, "")
	h.holdGPU(0, 1024)
	out := h.cellOutput("error OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB")
	want := []string{"status:busy", "error",
		"stream:stderr:PyTorch ran out of GPU memory. Who holds it now, largest first:\n" +
			"GPU0 Fake NVIDIA H200 (GPU-fa4e0000-0000-0000-0000-000000000000): 8 GiB total, 4 GiB free\n" +
			"  3 GiB      processes not visible here (other containers)\n" +
			"  1 GiB      this kernel\n",
		"status:idle"}
	if !slices.Equal(out, want) {
		t.Errorf("iopub:\n%q\nwant\n%q", out, want)
	}
}

// heldBy is a holder of a fake GPU that another user runs.
type heldBy struct {
	name string
	pid  int
}

// holdAs runs holder.py as u, holding dev with mib MiB, until the test
// ends: another user's process on the GPU. The fake's root is opened to
// u (the test's directories are root's alone).
func holdAs(t *testing.T, f *gputest.Fake, u testutil.User, dev, mib int) heldBy {
	t.Helper()
	for _, d := range []string{filepath.Dir(f.Root), f.Root, f.HolderDir} {
		testutil.NoErr(t, os.Chmod(d, 0o755))
	}
	testutil.NoErr(t, os.Chmod(filepath.Join(f.Root, "ctx"), 0o1777))
	if err := os.Chmod(f.Device(dev), 0o666); err != nil { // a GPU's device file, as /dev/nvidiaN is
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	testutil.NoErr(t, err)
	defer r.Close()
	cmd := exec.Command("/usr/bin/python3", filepath.Join(f.HolderDir, "holder.py"), strconv.Itoa(dev), strconv.Itoa(mib), "--ready-fd", "3")
	cmd.Env = append(os.Environ(), f.Env()...)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.Cred}
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	err = cmd.Start()
	w.Close()
	testutil.NoErr(t, err)
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("%s's holder did not hold GPU %d: %v\n%s", u.Name, dev, err, &stderr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return heldBy{name: u.Name, pid: pid}
}
