//go:build linux && e2e

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The JupyterLab extension (labextension/) installed into the current
// stack's venv as a user installs it, pip install ./labextension: pip
// builds it with npm (npm install, tsc, @jupyter/builder) in the
// repository's labextension/, whose node_modules stays for the next build.
// The install is redone only when the extension's sources change: a mark
// in the venv names the hash of the files the build reads. Under the
// venv's lock, as the venv itself is built.
func e2eLabExtension(t *testing.T, py string) {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "..", "labextension"))
	testutil.NoErr(t, err)
	sum, err := labextSourceHash(src)
	if err != nil {
		t.Fatalf("labextension sources: %v", err)
	}
	venv := filepath.Dir(filepath.Dir(py))
	mark := filepath.Join(venv, ".labext-"+sum)
	lock, err := os.OpenFile(venv+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	testutil.NoErr(t, err)
	defer lock.Close()
	testutil.NoErr(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	if _, err := os.Stat(mark); err == nil {
		t.Logf("labextension: installed already (%s)", filepath.Base(mark))
		return
	}
	if _, err := exec.LookPath("npm"); err != nil {
		testutil.RequireOrSkip(t, "need npm to build labextension/ (apt-get install npm): %v", err)
	}
	start := time.Now()
	pip := exec.Command(py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q",
		"--force-reinstall", "--no-deps", src)
	pip.Dir = src
	if out, err := pip.CombinedOutput(); err != nil {
		testutil.RequireOrSkip(t, "pip install ./labextension (npm and PyPI needed once): %v\n%s", err, out)
	}
	old, _ := filepath.Glob(filepath.Join(venv, ".labext-*"))
	for _, o := range old {
		os.Remove(o)
	}
	testutil.NoErr(t, os.WriteFile(mark, nil, 0o600))
	t.Logf("labextension: built and installed into %s in %v", venv, time.Since(start).Round(time.Second))
}

// labextSourceHash is the sha256 of the files the extension's build
// reads (not node_modules, nor what the build writes), with their names.
func labextSourceHash(src string) (string, error) {
	var files []string
	for _, pat := range []string{"package.json", "package-lock.json", "tsconfig.json", "pyproject.toml",
		"install.json", "src/*", "style/*", "tfgpu_kernel_lab/*.py"} {
		m, err := filepath.Glob(filepath.Join(src, pat))
		if err != nil {
			return "", err
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no sources in %s", src)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.IsDir() {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(src, f)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:6]), nil
}
