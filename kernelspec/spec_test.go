package kernelspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

var testPython = Python{Executable: "/usr/bin/python3", Prefix: "/usr", IPykernel: "6.17.0"}

func TestSpecGolden(t *testing.T) {
	tests := []struct {
		name   string
		golden string
		opts   Options
		python *Python // testPython when nil
	}{
		{name: "default", golden: "default.kernel.json",
			opts: Options{Binary: "/usr/local/bin/tfgpu-kernel", Version: "v0.1.0"}},
		{name: "custom name, display, env, run flags", golden: "custom.kernel.json",
			opts: Options{
				Name: "tf-gpu.2", DisplayName: "TF <GPU> & more", Binary: "/opt/tfgpu/bin/tfgpu-kernel",
				Version:  "v0.2.0-3-gabc",
				Env:      map[string]string{"TF_FORCE_GPU_ALLOW_GROWTH": "false", "CUDA_VISIBLE_DEVICES": "1", "EMPTY": ""},
				RunFlags: []string{"--log-level", "debug"},
			}},
		{name: "no version", golden: "noversion.kernel.json",
			opts: Options{Binary: "/b/tfgpu-kernel"}},
		{name: "ipykernel 7: its kernel_protocol_version", golden: "ipykernel7.kernel.json",
			opts:   Options{Binary: "/b/tfgpu-kernel"},
			python: &Python{Executable: "/opt/venv/bin/python", Prefix: "/opt/venv", IPykernel: "7.4.0", Protocol: "5.5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			py := testPython
			if tc.python != nil {
				py = *tc.python
			}
			got, err := KernelJSON(tc.opts, py)
			testutil.NoErr(t, err)
			path := filepath.Join("testdata", tc.golden)
			if *update {
				testutil.NoErr(t, os.WriteFile(path, got, 0o644))
			}
			if want := readFile(t, path); !bytes.Equal(got, want) {
				t.Errorf("kernel.json differs from %s (go test -update to rewrite):\n%s", path, got)
			}
			if !json.Valid(got) || !isOurs(got) {
				t.Errorf("kernel.json invalid or not marked as ours")
			}
		})
	}
}

func TestSpecInvalid(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		py   Python
	}{
		{"relative binary", Options{Binary: "tfgpu-kernel"}, testPython},
		{"relative python", Options{Binary: "/b"}, Python{Executable: "python3"}},
		{"empty env name", Options{Binary: "/b", Env: map[string]string{"": "x"}}, testPython},
		{"env name with =", Options{Binary: "/b", Env: map[string]string{"A=B": "x"}}, testPython},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := KernelJSON(tc.opts, tc.py); !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestSpecName(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"default", "", "tfgpu", true},
		{"plain", "tfgpu", "tfgpu", true},
		{"lower-cased like jupyter_client", "TF-GPU_2.x", "tf-gpu_2.x", true},
		{"space", "tf gpu", "", false},
		{"slash", "../x", "", false},
		{"dot", ".", "", false},
		{"dotdot", "..", "", false},
		{"unicode", "tfgpü", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizeName(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Errorf("NormalizeName(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("err %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestSpecIsOurs(t *testing.T) {
	tests := []struct {
		name, json string
		want       bool
	}{
		{"ours", `{"metadata":{"tfgpu":{"version":"x"}}}`, true},
		{"plain ipykernel", `{"argv":["python3"],"metadata":{"debugger":true}}`, false},
		{"null tag", `{"metadata":{"tfgpu":null}}`, false},
		{"garbage", `{`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isOurs([]byte(tc.json)); got != tc.want {
				t.Errorf("isOurs = %v, want %v", got, tc.want)
			}
		})
	}
}
