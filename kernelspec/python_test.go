package kernelspec

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

func pyOutput(py string, code string) (string, error) {
	out, err := exec.Command(py, "-c", code).Output()
	return strings.TrimSpace(string(out)), err
}

func pyCombined(py string, args ...string) (string, error) {
	out, err := exec.Command(py, args...).CombinedOutput()
	return string(out), err
}

// TestPythonDiscoverySkipsPathWithoutIPykernel is this machine's case: the
// python3 first on PATH (pyenv) lacks ipykernel, /usr/bin/python3 has it.
func TestPythonDiscoverySkipsPathWithoutIPykernel(t *testing.T) {
	want := systemPython(t)
	bin := t.TempDir()
	fake := fakePython(t, bin, "python3",
		`echo "ModuleNotFoundError: No module named 'ipykernel'" >&2; exit 1`)
	t.Setenv("PATH", bin)
	if c := Candidates(); len(c) != 2 || c[0] != fake || c[1] != FallbackPython {
		t.Fatalf("Candidates = %q, want [%s %s]", c, fake, FallbackPython)
	}
	got, err := FindPython(context.Background(), "")
	testutil.NoErr(t, err)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FindPython = %+v, want %+v", got, want)
	}
}

func TestPythonProbe(t *testing.T) {
	systemPython(t)
	dir := t.TempDir()
	tests := []struct {
		name    string
		python  string
		wantErr error  // errors.Is target; nil means success
		wantMsg string // substring of the error
	}{
		{name: "system python", python: FallbackPython},
		{name: "not found", python: dir + "/nope", wantErr: fs.ErrNotExist},
		{name: "crashes", python: fakePython(t, dir, "crash", `echo boom >&2; exit 3`), wantMsg: "boom"},
		{name: "runs without ipykernel",
			python:  fakePython(t, dir, "noipk", `echo '{"executable":"/x/python3","prefix":"/x","error":"ModuleNotFoundError: no ipykernel"}'`),
			wantErr: ErrNoIPykernel, wantMsg: "ModuleNotFoundError"},
		{name: "noise before the JSON line",
			python: fakePython(t, dir, "noisy", `echo 'site hook says hi'; echo '{"executable":"/x/python3","prefix":"/x","ipykernel":"9.9"}'`)},
		{name: "garbage", python: fakePython(t, dir, "garbage", `echo hello`), wantMsg: "unexpected probe output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			py, err := ProbePython(context.Background(), tc.python)
			if tc.wantErr == nil && tc.wantMsg == "" {
				if err != nil || py.IPykernel == "" || py.Executable == "" || py.Prefix == "" {
					t.Fatalf("ProbePython = %+v, %v", py, err)
				}
				return
			}
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %v; want Is(%v) containing %q", err, tc.wantErr, tc.wantMsg)
			}
		})
	}
}

// ipykernel's install() leaves the empty temporary directory it wrote its
// spec in; the probe, which runs at every install and doctor, must not.
func TestPythonProbeLeavesNoTemporaryDirectory(t *testing.T) {
	systemPython(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	py, err := ProbePython(context.Background(), FallbackPython)
	if err != nil || py.IPykernel == "" {
		t.Fatalf("ProbePython = %+v, %v", py, err)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the probe left %v in TMPDIR", left)
	}
}

func TestPythonProbeTimeout(t *testing.T) {
	old := ProbeTimeout
	ProbeTimeout = 200 * time.Millisecond
	t.Cleanup(func() { ProbeTimeout = old })
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	hang := fakePython(t, dir, "hang", "echo $$ > "+pidFile+"\nexec sleep 30")
	start := time.Now()
	_, err := ProbePython(context.Background(), hang)
	t.Logf("the probe gave up after %v", time.Since(start).Round(time.Millisecond))
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want a deadline error", err)
	}
	// The probe ended the hanging python, not the python its probe: the
	// sleep is gone (not a zombie either: reaped) when ProbePython returns.
	// (No pid: the shell was killed before it wrote it.)
	b, _ := os.ReadFile(pidFile)
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the hanging python %d outlived its probe", pid)
	}
}
