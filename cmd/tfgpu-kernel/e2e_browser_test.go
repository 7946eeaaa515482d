//go:build linux && e2e

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// JupyterLab 4.6 and Notebook 7.6 in Debian's headless chromium
// (testdata/e2e/browser.py, driven by testdata/browser/lab.mjs): open a
// "TF-GPU (clean restart)" notebook from Lab's launcher or Notebook's New
// menu, hold the fake GPU with an escaping holder,
// restart through the menu and its dialog, a kernel killed from outside,
// shut down; processes, NVML and ps checked after each step, and the GPU
// extension's status item and notifications (labextension/): Lab from
// the wheel's venv (its kernelspec, binary and extension), Notebook with
// the suite's kernelspec and pip install ./labextension. Screenshots
// of each step go to $TFGPU_ARTIFACTS/browser (default: the test's temp
// directory, kept in the log).
func TestE2EBrowser(t *testing.T) {
	s := e2eSetupStack(t, stackCurrent, "jupyterlab", "notebook", "jupyter_server")
	for _, tool := range []string{"node", "/usr/bin/chromium"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.RequireOrSkip(t, "need %s (apt-get install nodejs chromium): %v", tool, err)
		}
	}
	if _, err := os.Stat(filepath.Join("testdata", "browser", "node_modules", "playwright-core")); err != nil {
		// playwright-core as package-lock.json pins it (it never downloads
		// a browser), installed the first time, as the current stack's venv.
		npm := exec.Command("npm", "ci", "--prefix", filepath.Join("testdata", "browser"), "--no-audit", "--no-fund", "--loglevel=error")
		if out, err := npm.CombinedOutput(); err != nil {
			testutil.RequireOrSkip(t, "need playwright-core: npm ci --prefix cmd/tfgpu-kernel/testdata/browser: %v\n%s", err, out)
		}
	}
	artifacts := t.TempDir()
	if d := os.Getenv("TFGPU_ARTIFACTS"); d != "" {
		artifacts = filepath.Join(d, "browser")
		testutil.NoErr(t, os.MkdirAll(artifacts, 0o755))
	}
	for _, ui := range []string{"lab", "notebook"} {
		t.Run(ui, func(t *testing.T) {
			f := gputest.New(t, 2, gputest.Full)
			gs := *s
			gs.env = append(append([]string{}, s.env...), f.Env()...)
			if ui == "lab" {
				// JupyterLab from the wheel: a venv with the current stack
				// and `pip install tfgpu_kernel-*.whl`, whose kernelspec,
				// binary and extension are the ones Lab uses (JUPYTER_PATH
				// no longer puts the suite's kernelspec first).
				gs.python, gs.bin = e2eWheelVenv(t, s)
				gs.env = append(gs.env, "JUPYTER_PATH=")
			} else {
				// Notebook 7 with the extension on its own, as install.sh
				// --lab installs it: pip install ./labextension.
				e2eLabExtension(t, s.python)
			}
			gs.env = append(gs.env, "E2E_TFGPU_BIN="+gs.bin, "E2E_ARTIFACTS="+artifacts, "E2E_UI="+ui)
			res := gs.scenario(t, 300*time.Second, "browser.py")
			t.Logf("screenshots %s-*.png in %s; facts: %v", ui, artifacts, res.Facts)
		})
	}
}
