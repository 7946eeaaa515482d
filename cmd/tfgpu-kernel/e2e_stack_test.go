package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The E2E suites run against two Jupyter stacks (docs/testing.md):
//
//	debian   /usr/bin/python3: Debian 12's ipykernel 6.17, jupyter_client 7.4.9
//	current  a venv built from testdata/stacks/current.txt: what PyPI ships
//	         today (ipykernel 7.4, jupyter_client 8.10, pyzmq 27, ...)
const (
	stackDebian  = "debian"
	stackCurrent = "current"
)

// e2eStacks (stacks_quick_test.go, stacks_full_test.go) are the stacks
// every stack-aware E2E test runs on: Debian's alone in the quick suite,
// which needs nothing from the network; both in the full one.

var (
	currentOnce sync.Once
	currentPy   string
	currentErr  error
)

// stackPython is the Python of a stack, the current stack's venv built
// first if it is not yet (fatal in CI where it cannot be, a skip elsewhere).
func stackPython(t testing.TB, stack string) string {
	t.Helper()
	if stack == stackDebian {
		return "/usr/bin/python3"
	}
	currentOnce.Do(func() { currentPy, currentErr = currentVenv() })
	if currentErr != nil {
		testutil.RequireOrSkip(t, "the %s stack's venv: %v", stack, currentErr)
	}
	return currentPy
}

// currentVenv builds the current stack's venv once per requirements file,
// in the user's cache directory, and returns its python. A venv whose build
// finished is marked complete and reused by later runs; a half-built one is
// built again. A lock keeps two test binaries from building it at once.
func currentVenv() (string, error) {
	req, err := filepath.Abs(filepath.Join("testdata", "stacks", "current.txt"))
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(req)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	base := filepath.Join(cache, "tfgpu-kernel")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", err
	}
	venv := filepath.Join(base, "venv-current-"+hex.EncodeToString(sum[:6]))
	py, done := filepath.Join(venv, "bin", "python"), filepath.Join(venv, ".complete")

	lock, err := os.OpenFile(venv+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(done); err == nil {
		return py, nil
	}
	os.RemoveAll(venv)
	base3, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("no python3 on PATH to build the venv with: %w", err)
	}
	if out, err := exec.Command(base3, "-m", "venv", venv).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s -m venv %s: %v\n%s", base3, venv, err, out)
	}
	install := exec.Command(py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q", "-r", req)
	if out, err := install.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pip install -r %s: %v\n%s", req, err, out)
	}
	if err := os.WriteFile(done, b, 0o600); err != nil {
		return "", err
	}
	return py, nil
}
