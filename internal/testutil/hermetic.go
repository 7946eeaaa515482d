//go:build linux

package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// hermeticEnv is set in a test binary's environment once it runs in a
// mount namespace of its own (Hermetic), and inherited by what it starts.
const hermeticEnv = "TFGPU_TEST_HERMETIC"

// HostJupyterDirs are the directories every Jupyter on this machine reads
// whatever its environment says (jupyter_core's SYSTEM_JUPYTER_PATH and
// SYSTEM_CONFIG_PATH, /usr/bin/python3's sys.prefix ones, IPython's
// system and profile directories, and the home's, which some tests keep):
// a kernelspec installed on the host (a system-wide "tfgpu" or "ir",
// say), a site config or an IPython startup file would otherwise change
// what the tests see, and a kernel a test starts would write root's
// IPython history. Only those that exist.
func HostJupyterDirs() []string {
	dirs := []string{"/usr/local/share/jupyter", "/usr/share/jupyter/kernels", "/etc/jupyter", "/usr/local/etc/jupyter",
		"/usr/etc/jupyter", "/etc/ipython", "/usr/local/etc/ipython"}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		dirs = append(dirs, filepath.Join(home, ".local", "share", "jupyter"), filepath.Join(home, ".jupyter"),
			filepath.Join(home, ".local", "etc", "jupyter"), filepath.Join(home, ".ipython"))
	}
	dirs = append(dirs, pythonPrefixDirs()...)
	var have []string
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			have = append(have, d)
		}
	}
	return have
}

// pythonPrefixDirs are the kernelspec and config directories of the
// sys.prefix of the python3 on PATH (a pyenv's, a conda's), which
// jupyter_core searches too (ENV_JUPYTER_PATH, ENV_CONFIG_PATH): a
// kernel installed there with --sys-prefix is the host's. Only asked as
// root, before Hermetic's namespace, the only time they are hidden.
func pythonPrefixDirs() []string {
	if os.Geteuid() != 0 || os.Getenv(hermeticEnv) != "" {
		return nil
	}
	return probePythonPrefixDirs()
}

// probePythonPrefixDirs asks the python3 on PATH for pythonPrefixDirs.
func probePythonPrefixDirs() []string {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil
	}
	out, err := exec.Command(py, "-I", "-c", "import sys; print(sys.prefix); print(sys.exec_prefix)").Output()
	if err != nil {
		return nil
	}
	var dirs []string
	for _, p := range strings.Fields(string(out)) {
		if filepath.IsAbs(p) && p != "/usr" && p != "/usr/local" { // those are HostJupyterDirs' own
			dirs = append(dirs, filepath.Join(p, "share", "jupyter", "kernels"), filepath.Join(p, "etc", "jupyter"))
		}
	}
	return slices.Compact(dirs)
}

// HostNVML are the NVIDIA driver's NVML libraries the dynamic loader finds
// on this machine (ldconfig -p): none on the team's machines, the real
// driver on a GPU host, where a test of "no driver" would find it.
func HostNVML() []string {
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		return nil
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		if _, path, ok := strings.Cut(l, " => "); ok && strings.Contains(l, "libnvidia-ml.so") {
			if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
				libs = append(libs, path)
			}
		}
	}
	return libs
}

// Hermetic removes JupyterEnv from the environment, then re-executes the
// test binary, when it runs as root, in a mount namespace of its own
// where each of dirs is an empty tmpfs and each of files reads as
// /dev/null, so that nothing installed on the host changes a test's
// outcome; nothing is mounted or changed on the host. The pid, the
// arguments and the open files stay (exec, twice). Without root, or
// without unshare(1), it returns with only the environment cleared: tests
// that need the host hidden call RequireHermetic. Call it first thing in
// TestMain, after the branches where the binary plays a helper process.
func Hermetic(dirs, files []string) {
	CleanEnv()
	if os.Geteuid() != 0 || os.Getenv(hermeticEnv) != "" {
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	for _, p := range append(slices.Clone(dirs), files...) {
		if strings.ContainsRune(p, ':') {
			return // cannot be passed; RequireHermetic says so
		}
	}
	const script = `set -e
IFS=:
for d in $TFGPU_TEST_HIDE_DIRS; do mount -t tmpfs -o mode=0755,size=64m tfgpu-test-hide "$d"; done
for f in $TFGPU_TEST_HIDE_FILES; do mount --bind /dev/null "$f"; done
unset IFS TFGPU_TEST_HIDE_DIRS TFGPU_TEST_HIDE_FILES
exec "$@"`
	env := append(os.Environ(), hermeticEnv+"=1",
		"TFGPU_TEST_HIDE_DIRS="+strings.Join(dirs, ":"), "TFGPU_TEST_HIDE_FILES="+strings.Join(files, ":"))
	argv := append([]string{"unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", self}, os.Args[1:]...)
	err = syscall.Exec(unshare, argv, env)
	os.Stderr.WriteString("tests: cannot hide the host's files: " + err.Error() + "\n") // only when the exec failed
}

// RequireHermetic is for a test whose outcome something on the host could
// change (a kernelspec installed there, the NVIDIA driver): it needs
// Hermetic's namespace, hence root (a failure in CI, a skip elsewhere).
func RequireHermetic(t testing.TB) {
	t.Helper()
	if os.Getenv(hermeticEnv) == "" {
		RequireOrSkip(t, "needs root and unshare(1), to hide the host's Jupyter directories and NVIDIA driver")
	}
}
