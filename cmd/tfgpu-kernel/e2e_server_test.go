//go:build linux && e2e

package main

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Issue 5, "The scenario users meet": the real Jupyter server and nbconvert
// start the installed kernelspec themselves, with the fake NVML standing in
// for the GPU; one scenario of testdata/e2e/server.py per subtest (see its
// docstring for what each checks):
//
//	rest       jupyter-notebook 6.4.12 driven with curl over its REST API:
//	           start, restart and delete a kernel that holds GPU memory and
//	           started a setsid'd holder; processes, NVML and `ps --json`
//	           checked after each step
//	nbconvert  `nbconvert --execute` of testdata/e2e/tfgpu_smoke.ipynb: its
//	           outputs, and nothing of the kernel's tree left when it exits
//	papermill  the same notebook through papermill (current stack)
//	park       `tfgpu-kernel stop` and `stop --hold` of a kernel the server
//	           started, with its restarter on: the kernel stays stopped, the
//	           next cell starts a fresh one and is told (#23)
//	parknb     nbclient through a notebook whose running cell has its kernel
//	           stopped: the cell is told, nbclient goes on in a fresh kernel
//
// On the current stack the server is jupyter_server 2 (what JupyterLab 4
// and Notebook 7 run on) instead of the classic notebook 6.4.
//
// The survivor check covers the server and everything it started: they all
// carry the run's E2E_TAG.
func TestE2EServer(t *testing.T) {
	eachStack(t, func(t *testing.T, stack string) {
		mods := []string{"notebook", "nbconvert", "nbformat"}
		scenarios := []struct {
			name    string
			timeout time.Duration
			stock   bool // also meaningful against a stock kernelspec
		}{
			{name: "rest", timeout: 180 * time.Second},
			{name: "nbconvert", timeout: 180 * time.Second, stock: true},
			{name: "park", timeout: 180 * time.Second},
			{name: "parknb", timeout: 180 * time.Second},
		}
		if stack == stackCurrent { // jupyter_server 2, papermill and jupyter-resource-usage
			mods = append(mods, "jupyter_server", "papermill", "jupyter_resource_usage")
			scenarios = append(scenarios, scenarios[1])
			scenarios[len(scenarios)-1].name = "papermill"
			scenarios = append(scenarios, struct {
				name    string
				timeout time.Duration
				stock   bool
			}{name: "usage", timeout: 120 * time.Second})
		}
		s := e2eSetupStack(t, stack, mods...)
		e2eRequireTool(t, "curl") // the REST scenario talks to the server as a user would
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				if !s.wrapped && !sc.stock {
					t.Skip("restart and shutdown checks through NVML and ps are the supervisor's")
				}
				f := gputest.New(t, 2, gputest.Full)
				gs := *s
				gs.env = append(append(append([]string{}, s.env...), f.Env()...), "E2E_TFGPU_BIN="+s.bin)
				gs.scenario(t, sc.timeout, "server.py", sc.name)
			})
		}
	})
}

// e2eRequireTool is e2eSetup's rule for a command the scenarios run: fatal
// in CI, a skip elsewhere.
func e2eRequireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		msg := fmt.Sprintf("need %s (apt-get install %s): %v", name, name, err)
		testutil.RequireOrSkip(t, "%s", msg)
	}
}
