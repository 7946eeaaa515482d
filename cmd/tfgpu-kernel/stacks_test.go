package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// e2eStacks (stacks_quick_test.go, e2e_stacks_full_test.go) are the stacks
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
	testutil.Integration(t)
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
// in the user's cache directory, with the first python3 on PATH, and
// returns its python.
func currentVenv() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	base3, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("no python3 on PATH to build the venv with: %w", err)
	}
	return stackVenv("current.txt", filepath.Join(cache, "tfgpu-kernel"), "venv-current-", base3, 0o700, "-r")
}

var (
	usersCurrentOnce sync.Once
	usersCurrentPy   string
	usersCurrentErr  error
)

// usersStackPython is a stack's Python that every user can run: root's
// venv of the current stack lives under /root, which no one else may
// enter (and so does the Python it was made from, pyenv's, say), so the
// current stack's venv for users is another one, built once from
// Debian's /usr/bin/python3 in a world-readable cache. Debian's Python
// (3.11.2) is older than some of current.txt's pins ask for (soupsieve
// 4.1 wants 3.11.5), so this one holds the kernel's side of the stack,
// ipykernel and jupyter_client with what they need, at current.txt's
// pins, as a user's `pip install ipykernel` into a venv does
// (TestE2EInstall's venv user).
func usersStackPython(t testing.TB, stack string) string {
	t.Helper()
	if stack == stackDebian {
		return "/usr/bin/python3"
	}
	usersCurrentOnce.Do(func() {
		usersCurrentPy, usersCurrentErr = stackVenv("current.txt", "/var/cache/tfgpu-kernel-tests", "venv-users-current-", "/usr/bin/python3", 0o755,
			"-c", "ipykernel", "jupyter_client")
	})
	if usersCurrentErr != nil {
		testutil.RequireOrSkip(t, "the %s stack's venv for users: %v", stack, usersCurrentErr)
	}
	return usersCurrentPy
}

// stackVenv builds a venv of a stack once per requirements file (current.txt,
// TestE2EGateway's gateway.txt, TestE2EHub's hub.txt), as
// base/<prefix><hash of testdata/stacks/reqs> (base made with mode), with
// the Python base3, and returns its python. pip installs what pipArgs
// says, testdata/stacks/reqs after the first: "-r" (all of it),
// or "-c" and the packages to install at its pins. A venv whose build
// finished is marked complete and reused by later runs; a half-built one
// is built again. A lock keeps two test binaries from building it at
// once. With mode 0755 every user may read and run what it holds.
func stackVenv(reqs, base, prefix, base3 string, mode os.FileMode, pipArgs ...string) (string, error) {
	req, err := filepath.Abs(filepath.Join("testdata", "stacks", reqs))
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(req)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	if err := os.MkdirAll(base, mode); err != nil {
		return "", err
	}
	venv := filepath.Join(base, prefix+hex.EncodeToString(sum[:6]))
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
	if out, err := exec.Command(base3, "-m", "venv", venv).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s -m venv %s: %v\n%s", base3, venv, err, out)
	}
	args := append([]string{"-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q", pipArgs[0], req}, pipArgs[1:]...)
	if out, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("pip install %s %s: %v\n%s", strings.Join(pipArgs, " "), req, err, out)
	}
	if mode&0o005 != 0 { // whatever umask pip ran under
		if out, err := exec.Command("chmod", "-R", "a+rX", venv).CombinedOutput(); err != nil {
			return "", fmt.Errorf("chmod -R a+rX %s: %v\n%s", venv, err, out)
		}
	}
	if err := os.WriteFile(done, b, 0o644); err != nil {
		return "", err
	}
	return py, nil
}
