//go:build linux

package testutil

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Host is a machine's state planted for a test of hermeticity: what a
// real host may have that the quick suite must not see.
type Host struct {
	// Dirs maps a directory of the machine (/usr/share/jupyter/kernels)
	// to a directory of the test's whose files it is to hold.
	Dirs map[string]string
	// Env is added to the environment, as the shell of whoever runs go
	// test may have it (JUPYTER_PATH=..., HOME=...).
	Env []string
}

// Run runs this test binary with args (-test.run=...) on h: as root, in
// a mount namespace of its own where each of h.Dirs is a tmpfs holding a
// copy of its files (a directory missing on the machine is made in an
// overlay of its nearest existing parent), and with h.Env. Nothing is
// mounted or changed outside that namespace. The binary is not told it
// is hermetic, so its TestMain's Hermetic re-executes it hiding what was
// planted, as it would hide the host's; with hide false it is told it
// already is, so that Hermetic hides nothing: the control, which sees
// what was planted. It returns the binary's output and exit error; the
// binary is killed (its process group) and reaped before the test's
// deadline.
func (h Host) Run(t testing.TB, hide bool, args ...string) (string, error) {
	t.Helper()
	RequireHermetic(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return h.Exec(t, hide, append([]string{self}, args...)...)
}

// Exec is Run with any command, argv[0] looked up in PATH: go test of
// other packages (TestQuickTestsOnAPlantedHost), whose test binaries'
// TestMain hide the host, or, with hide false, not (they are told they
// already run hermetic).
func (h Host) Exec(t testing.TB, hide bool, argv ...string) (string, error) {
	t.Helper()
	RequireHermetic(t)
	const script = `set -e
scratch=$1; shift
mount -t tmpfs -o mode=0700,size=16m tfgpu-test-plant "$scratch"
while [ "$1" != -- ]; do
	d=$1 src=$2; shift 2
	if [ ! -d "$d" ]; then
		a=$(dirname "$d")
		while [ ! -d "$a" ]; do a=$(dirname "$a"); done
		o=$(mktemp -d "$scratch/overlay.XXXXXX")
		mkdir "$o/upper" "$o/work"
		mount -t overlay -o "lowerdir=$a,upperdir=$o/upper,workdir=$o/work" tfgpu-test-plant "$a"
		mkdir -p "$d"
	fi
	mount -t tmpfs -o mode=0755,size=16m tfgpu-test-plant "$d"
	cp -R "$src/." "$d/"
done
shift
exec "$@"`
	uargv := []string{"--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", t.TempDir()}
	targets := make([]string, 0, len(h.Dirs))
	for d := range h.Dirs {
		targets = append(targets, d)
	}
	sort.Strings(targets) // a parent before what is under it
	for _, d := range targets {
		if !filepath.IsAbs(d) || strings.ContainsAny(d, ",:") {
			t.Fatalf("Host.Dirs: %q is not an absolute path an overlay can name", d)
		}
		uargv = append(uargv, d, h.Dirs[d])
	}
	uargv = append(append(uargv, "--"), argv...)

	ctx := context.Background()
	if dl, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := dl.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d.Add(-10*time.Second))
			defer cancel()
		}
	}
	cmd := exec.CommandContext(ctx, "unshare", uargv...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, hermeticEnv+"=") })
	cmd.Env = append(cmd.Env, h.Env...)
	if !hide {
		cmd.Env = append(cmd.Env, hermeticEnv+"=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}
