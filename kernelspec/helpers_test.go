package kernelspec

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// systemPython returns /usr/bin/python3 if it imports ipykernel (Debian
// python3-ipykernel). Missing in CI (CI=true) is a failure, never a skip.
func systemPython(t *testing.T) Python {
	t.Helper()
	testutil.Integration(t)
	py, err := ProbePython(context.Background(), FallbackPython)
	if err != nil {
		testutil.RequireOrSkip(t, "need %s with ipykernel (apt-get install python3-ipykernel): %v", FallbackPython, err)
	}
	return py
}

// fakePython writes an executable shell script named name into dir.
func fakePython(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	testutil.NoErr(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return p
}

// isolate points every Jupyter data dir variable at a fresh temp dir so no
// test reads or writes the real home.
func isolate(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("JUPYTER_DATA_DIR", "")
	t.Setenv("XDG_DATA_HOME", "")
	return home
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	testutil.NoErr(t, err)
	return b
}

// mask sets the process umask and returns the previous one.
func mask(t *testing.T, m int) int {
	t.Helper()
	return syscall.Umask(m)
}
