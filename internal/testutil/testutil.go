// Package testutil holds what the tests of several packages share. Only
// tests import it.
package testutil

import (
	"bytes"
	"os"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer that a logger or os/exec's copying goroutine
// and the test may use at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// MainHermetic is the whole TestMain of a package whose tests need the
// host's Jupyter directories hidden and nothing else: Hermetic (which
// clears the environment, CleanEnv), then the tests.
func MainHermetic(m *testing.M) {
	Hermetic(HostJupyterDirs(), nil)
	os.Exit(m.Run())
}

// MainClean is the whole TestMain of a package whose tests need only the
// environment cleared (CleanEnv), then the tests.
func MainClean(m *testing.M) {
	CleanEnv()
	os.Exit(m.Run())
}

// PrivateDir is a t.TempDir of mode 0700, as state directories must be
// (testing makes them 0755).
func PrivateDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// NoErr ends the test (t.Fatal) with err unless it is nil: a setup step's
// `if err := os.WriteFile(…); err != nil { t.Fatal(err) }` on one line.
func NoErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// RequireOrSkip is the one rule for a dependency a test lacks (the
// Python stack, root, a cgroup hierarchy, a tool): it fails the test in
// CI (CI=true), where .ci/run installs everything the tests need, so
// that a missing dependency is never a skip there; elsewhere, and under
// -short (the unit-only run, which needs none of them, CI or not), it
// skips.
func RequireOrSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" && !testing.Short() {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// Integration marks a test that needs more than Go and this process: one
// that starts real kernels or Python, needs root, cgroups, other users,
// Slurm or podman, or builds binaries. Under -short (go test -short
// ./..., the unit-only run: no root, under 30 s) it skips; otherwise it
// does nothing, so the quick and full suites run every such test and
// their missing dependencies still fail in CI (RequireOrSkip).
func Integration(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped under -short, the unit-only run (docs/testing.md)")
	}
}

// DirNames lists the names in dir, sorted.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
