package kernelspec

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// What Install writes, ReadPrevious reads back: an upgrade keeps it.
func TestReadPrevious(t *testing.T) {
	py := Python{Executable: "/v/bin/python3", IPykernel: "7.4.0", Args: []string{"-Xfrozen_modules=off"}}
	write := func(t *testing.T, data []byte) string {
		dir := filepath.Join(t.TempDir(), "tfgpu")
		testutil.NoErr(t, os.MkdirAll(dir, 0o755))
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, "kernel.json"), data, 0o644))
		return dir
	}
	// A boolean is one word, --flag=value, as install writes it: an upgrade
	// of a kernelspec installed with --no-spare was refused as "not --flag
	// value pairs" (#34).
	o := Options{Binary: "/usr/local/bin/tfgpu-kernel", DisplayName: "GPU box", Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
		RunFlags: []string{"--memory-limit", "8G", "--no-spare=true", "--gpu-memory-limit", "40G"}}
	data, err := KernelJSON(o, py)
	testutil.NoErr(t, err)
	p, err := ReadPrevious(write(t, data))
	testutil.NoErr(t, err)
	want := &Previous{Dir: p.Dir, Binary: o.Binary, Python: py.Executable, DisplayName: "GPU box",
		RunFlags: [][2]string{{"--memory-limit", "8G"}, {"--no-spare", "true"}, {"--gpu-memory-limit", "40G"}},
		Env:      map[string]string{"CUDA_VISIBLE_DEVICES": "0", "TF_FORCE_GPU_ALLOW_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
		Kernel:   []string{"/v/bin/python3", "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("ReadPrevious =\n%+v, want\n%+v", p, want)
	}
	o.DisplayName = ""
	data, _ = KernelJSON(o, py)
	if p, err := ReadPrevious(write(t, data)); err != nil || !p.DisplayDefault {
		t.Errorf("the default display name: %+v, %v", p, err)
	}

	// A wrapper: what --env added is what differs from theirs.
	theirs := filepath.Join(t.TempDir(), "condaenv")
	testutil.NoErr(t, os.MkdirAll(theirs, 0o755))
	if err := os.WriteFile(filepath.Join(theirs, "kernel.json"), []byte(`{"argv":["/c/bin/python","-m","ipykernel_launcher","-f","{connection_file}"],
		"display_name":"Conda TF","language":"python","env":{"A":"1","B":"2"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := ReadSpec(theirs)
	testutil.NoErr(t, err)
	wo := Options{Binary: o.Binary, Env: map[string]string{"B": "3", "C": "4"}, RunFlags: []string{"--cgroup", "v1"}}
	data, err = WrapJSON(wo, f)
	testutil.NoErr(t, err)
	p, err = ReadPrevious(write(t, data))
	testutil.NoErr(t, err)
	if p.Wraps != "condaenv" || p.WrapsDir != theirs || p.Python != "" || !p.DisplayDefault ||
		!reflect.DeepEqual(p.Env, map[string]string{"B": "3", "C": "4"}) || !reflect.DeepEqual(p.RunFlags, [][2]string{{"--cgroup", "v1"}}) {
		t.Errorf("ReadPrevious of a wrapper = %+v", p)
	}

	for _, tc := range []struct{ name, json, want string }{
		{"not ours", `{"argv":["python3"],"display_name":"x"}`, "not written by tfgpu-kernel"},
		{"not our argv", `{"argv":["/bin/x","-m","y"],"metadata":{"tfgpu":{}}}`, "is not one tfgpu-kernel writes"},
		{"odd run flags", `{"argv":["/b","run","--cgroup","-f","{connection_file}","--","p"],"metadata":{"tfgpu":{}}}`, "pairs"},
		{"a flag that is not one", `{"argv":["/b","run","x","y","-f","{connection_file}","--","p"],"metadata":{"tfgpu":{}}}`, "pairs"},
		{"nothing after --", `{"argv":["/b","run","-f","{connection_file}","--"],"metadata":{"tfgpu":{}}}`, "is not one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadPrevious(write(t, []byte(tc.json)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if tc.name == "not ours" && !errors.Is(err, ErrNotOurs) {
				t.Errorf("not ErrNotOurs: %v", err)
			}
		})
	}
	if p, err := ReadPrevious(filepath.Join(t.TempDir(), "none")); p != nil || err != nil {
		t.Errorf("no kernelspec: %+v, %v", p, err)
	}
}
