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

// RequireOrSkip fails the test in CI (CI=true), where .ci/run installs
// everything the tests need, so that a missing dependency is never a
// skip there; elsewhere it skips.
func RequireOrSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}
