package kernelspec

import (
	"flag"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The run flags given go into argv in RunFlags order, as run takes them:
// an empty one is run's default, a boolean is --flag=value ("--spare
// false" would end run's flags), a relative library path is made absolute.
func TestRunArgv(t *testing.T) {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	for _, name := range []string{"memory-limit", "log-level", "nvml-library", "cgroup"} {
		fs.String(name, "", "")
	}
	fs.Bool("spare", true, "")
	testutil.NoErr(t, fs.Parse([]string{"--spare=false", "--nvml-library", "lib/libnvidia-ml.so.1", "--memory-limit", "8G", "--log-level", ""}))
	u := Upgrade{Set: map[string]bool{}, Flags: fs, RunFlags: []string{"cgroup", "memory-limit", "nvml-library", "log-level", "spare"}}
	fs.Visit(func(f *flag.Flag) { u.Set[f.Name] = true })
	abs, _ := filepath.Abs("lib/libnvidia-ml.so.1")
	want := []string{"--memory-limit", "8G", "--nvml-library", abs, "--spare=false"}
	if got, err := u.runArgv(); err != nil || !slices.Equal(got, want) {
		t.Errorf("runArgv = %q, %v; want %q", got, err, want)
	}
}
