package kernelspec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

func TestLauncherSpec(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "share", "jupyter", "kernels", "tfgpu")
	testutil.NoErr(t, WriteLauncherSpec(dir, "v1.2-3-gabc"))
	data, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	testutil.NoErr(t, err)
	var s struct {
		Argv        []string          `json:"argv"`
		DisplayName string            `json:"display_name"`
		Env         map[string]string `json:"env"`
		Metadata    struct {
			TFGPU struct{ Version string } `json:"tfgpu"`
		} `json:"metadata"`
	}
	testutil.NoErr(t, json.Unmarshal(data, &s))
	if !slices.Equal(s.Argv, []string{"python", "-m", "tfgpu_kernel", "-f", "{connection_file}"}) ||
		s.DisplayName != DefaultDisplayName || s.Metadata.TFGPU.Version != "v1.2-3-gabc" ||
		s.Env["TF_FORCE_GPU_ALLOW_GROWTH"] != "true" || !isOurs(data) {
		t.Fatalf("kernel.json:\n%s", data)
	}
	if !IsLauncherArgv(s.Argv) || !IsLauncherArgv([]string{"python", "-m", "tfgpu_kernel", "--memory-limit", "8G", "-f", "{connection_file}"}) ||
		IsLauncherArgv([]string{"python", "-m", "ipykernel_launcher", "-f", "{connection_file}"}) {
		t.Fatal("IsLauncherArgv")
	}
	for _, n := range logoFiles {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s: %v %v", n, fi, err)
		}
	}
	if err := WriteLauncherSpec(dir, "x"); err == nil {
		t.Fatal("wrote over an existing directory")
	}
}
