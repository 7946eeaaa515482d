package runflags

import (
	"bytes"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// run refuses a TFGPU_ variable it would ignore, with one line naming it
// (install's line for --env, NoSuchSetting), and takes every setting's and
// every name of InternalEnv.
func TestCheckRunEnv(t *testing.T) {
	var settings, internal []string
	for _, f := range append(slices.Clone(KernelspecFlags), "state-dir") {
		settings = append(settings, EnvName(f)+"=x")
	}
	for k := range InternalEnv {
		internal = append(internal, k+"=1")
	}
	for _, tc := range []struct {
		name    string
		environ []string
		bad     string // the name the line must start with; "": taken
	}{
		{name: "a typo", environ: []string{"HOME=/root", "TFGPU_MEMORY_LIMT=8G"}, bad: "TFGPU_MEMORY_LIMT"},
		{name: "empty, still a typo", environ: []string{"TFGPU_MEMORY_LIMT="}, bad: "TFGPU_MEMORY_LIMT"},
		{name: "the first of two", environ: []string{"TFGPU_MEMORY_LIMT=1", "TFGPU_GPU_MEM_LIMIT=8G"}, bad: "TFGPU_GPU_MEM_LIMIT"},
		{name: "beside good ones", environ: append(slices.Clone(settings), "TFGPU_CONFIRM_TIMOUT=5s"), bad: "TFGPU_CONFIRM_TIMOUT"},
		{name: "a name that would break the line", environ: []string{"TFGPU_MEMORY_LIMT\x1b[2J=1"}, bad: "TFGPU_MEMORY_LIMT?[2J"},
		{name: "every setting", environ: settings},
		{name: "every internal name", environ: internal},
		{name: "not ours", environ: []string{"TFGPU=1", "E2E_TFGPU_BIN=x", "tfgpu_memory_limt=1", "CUDA_VISIBLE_DEVICES=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckEnv(tc.environ)
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.bad == "":
				return
			case err == nil:
				t.Fatalf("%q taken; want %s refused", tc.environ, tc.bad)
			}
			line := err.Error()
			want := tc.bad + ": tfgpu-kernel run has no such setting (it reads TFGPU_CGROUP, TFGPU_MEMORY_LIMIT,"
			if !strings.HasPrefix(line, want) || strings.ContainsAny(line, "\n\r") {
				t.Fatalf("%q; want one line starting %q", line, want)
			}
		})
	}
}

// Every TFGPU_ name the repository uses (Go, Python, shell, the docs) is a
// setting of run's or in InternalEnv, so that run never refuses what this
// program or its tests set for their own processes; but for the typos the
// tests and docs show on purpose. And every name of InternalEnv is still
// used somewhere.
func TestEveryTFGPUNameIsKnown(t *testing.T) {
	typos := map[string]bool{"TFGPU_GPU_MEM_LIMIT": true, "TFGPU_MEMORY_LIMT": true, "TFGPU_CONFIRM_TIMOUT": true}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	testutil.NoErr(t, err)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	name := regexp.MustCompile(`(?:^|[^A-Za-z0-9_])(TFGPU_[A-Z0-9_]*[A-Z0-9])`)
	used := map[string][]string{} // name → files
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil || bytes.IndexByte(b, 0) >= 0 { // gone from the tree, or binary
			continue
		}
		for _, m := range name.FindAllSubmatch(b, -1) {
			used[string(m[1])] = append(used[string(m[1])], f)
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d TFGPU_ names under %s: the scan is broken", len(used), root)
	}
	for _, k := range slices.Sorted(maps.Keys(used)) {
		_, setting := FlagOfEnv(k)
		_, internal := InternalEnv[k]
		switch {
		case setting && internal:
			t.Errorf("%s is a setting and in InternalEnv", k)
		case !setting && !internal && !typos[k]:
			t.Errorf("%s (used in %s) is neither a setting of run's nor in InternalEnv (env.go): run would refuse it", k, strings.Join(slices.Compact(used[k]), ", "))
		}
	}
	for k := range InternalEnv {
		if files := slices.DeleteFunc(slices.Clone(used[k]), func(f string) bool { return f == "internal/runflags/env.go" }); len(files) == 0 {
			t.Errorf("InternalEnv's %s is used nowhere else: remove it", k)
		}
	}
}

// Config on bad settings: the one line on stderr, once; with a usable
// connection file, the Config of a supervisor that refuses (its Refusal
// the line without the pointer to --help), else exit 2 as before. Good
// settings and InternalEnv's names give a supervisor that starts the
// kernel.
func TestRunConfigRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	conn := filepath.Join(dir, "kernel-envrun.json")
	if err := jmsg.WriteFile(conn, &jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1", Ports: [5]int{1, 2, 3, 4, 5},
		Key: "k", SignatureScheme: "hmac-sha256"}); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "kernel-missing.json")
	kernel := []string{"--", "/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		refusal string // the Config's Refusal must start with it; "": none
		code    int    // when Config is not ok
	}{
		{name: "a typo", env: map[string]string{"TFGPU_MEMORY_LIMT": "8G"}, args: []string{"-f", conn},
			refusal: "TFGPU_MEMORY_LIMT: tfgpu-kernel run has no such setting"},
		{name: "a bad value", env: map[string]string{"TFGPU_CONFIRM_TIMEOUT": "5"}, args: []string{"-f", conn},
			refusal: `TFGPU_CONFIRM_TIMEOUT="5": want a duration such as`},
		{name: "a value out of range", env: map[string]string{"TFGPU_MEMORY_LIMIT": "1K"}, args: []string{"-f", conn},
			refusal: `TFGPU_MEMORY_LIMIT "1K": too small for any kernel`},
		{name: "a bad --gpus", env: map[string]string{"TFGPU_GPUS": "0,1"}, args: []string{"-f", conn},
			refusal: `TFGPU_GPUS "0,1": want auto, auto:N (1 to 16 GPUs), auto:min-free=SIZE or auto:N,min-free=SIZE`},
		{name: "a bad --gpus size", args: []string{"--gpus", "auto:min-free=lots", "-f", conn},
			refusal: `--gpus "auto:min-free=lots": bad memory size "lots"`},
		{name: "a flag of another version, before -f", args: []string{"--bogus", "-f", conn}, refusal: "unknown flag --bogus"},
		{name: "a bad flag value, -f= after it", args: []string{"--kill-timeout", "soon", "-f=" + conn}, refusal: `--kill-timeout "soon": want a duration`},
		{name: "no connection file to answer on", env: map[string]string{"TFGPU_CONFIRM_TIMEOUT": "5"}, args: []string{"-f", missing}, code: 2},
		{name: "no -f", args: []string{"--bogus"}, code: 2},
		{name: "good settings", env: map[string]string{"TFGPU_CONFIRM_TIMEOUT": "5s", "TFGPU_MEMORY_LIMIT": "8G", "TFGPU_SPARE": "0", "TFGPU_GPUS": "auto:2,min-free=20G"}, args: []string{"-f", conn}},
		{name: "internal names", env: func() map[string]string {
			m := map[string]string{}
			for k := range InternalEnv {
				m[k] = "1"
			}
			return m
		}(), args: []string{"-f", conn}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var cfg = struct {
				refusal string
				code    int
				ok      bool
			}{}
			// Config tunes the runtime for a supervisor; this is a test.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
			defer debug.SetGCPercent(debug.SetGCPercent(100))
			stderr := captureStderr(t, func() {
				c, code, ok := Config("run", append(slices.Clone(tc.args), kernel...))
				cfg.refusal, cfg.code, cfg.ok = c.Refusal, code, ok
			})
			switch {
			case tc.refusal == "" && tc.code == 0:
				if !cfg.ok || cfg.refusal != "" || stderr != "" {
					t.Fatalf("ok %v, refusal %q, stderr %q; want a supervisor that starts the kernel", cfg.ok, cfg.refusal, stderr)
				}
				return
			case tc.refusal == "":
				if cfg.ok || cfg.code != tc.code {
					t.Fatalf("ok %v, code %d; want exit %d", cfg.ok, cfg.code, tc.code)
				}
			default:
				if !cfg.ok || !strings.HasPrefix(cfg.refusal, tc.refusal) || strings.Contains(cfg.refusal, "--help") {
					t.Fatalf("ok %v (code %d), refusal %q; want one starting %q, without the pointer to --help", cfg.ok, cfg.code, cfg.refusal, tc.refusal)
				}
			}
			if !strings.HasPrefix(stderr, "tfgpu-kernel run: ") || strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
				t.Fatalf("stderr %q; want one line", stderr)
			}
			if tc.refusal != "" && !strings.Contains(stderr, tc.refusal) {
				t.Fatalf("stderr %q does not say %q", stderr, tc.refusal)
			}
		})
	}
}

// captureStderr returns what f wrote to os.Stderr.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	testutil.NoErr(t, err)
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		r.Close()
		got <- string(b)
	}()
	saved := os.Stderr
	os.Stderr = w
	func() {
		defer func() { os.Stderr = saved; w.Close() }()
		f()
	}()
	return <-got
}
