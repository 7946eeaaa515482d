package kernelspec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The real jupyter_client of the tests finds no kernelspec of the host's,
// nor any in a directory it searches, and no Jupyter variable of the
// environment of whoever ran go test moves it (TestMain's Hermetic):
// ipykernel's built-in python3, which has no kernel.json, is all it has.
func TestJupyterFindsNothingOfTheHost(t *testing.T) {
	testutil.RequireHermetic(t)
	py := systemPython(t)
	for _, k := range testutil.JupyterEnv {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%s in the tests' environment", k, v)
		}
	}
	l, err := list(context.Background(), py.Executable)
	testutil.NoErr(t, err)
	for name, s := range l.Specs {
		t.Errorf("jupyter_client finds kernelspec %s in %s", name, s.Dir)
	}
	for _, d := range l.Dirs {
		if ents, err := os.ReadDir(d); err == nil && len(ents) > 0 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("%s, which jupyter_client searches, holds %q", d, names)
		}
	}
}

// hostNames are the kernelspecs TestHostKernelspecsUnseen plants on the
// machine: those a real host has (IRkernel's, a Julia's, Debian's
// python3, root's own tfgpu) and the names this package's tests make
// ("dup", "mixed", as TestWrapFindSpec's own are found first).
var hostNames = []string{"ir", "julia-1.10", "python3", "tfgpu", "dup", "mixed"}

// TestHostKernelspecsUnseen runs this package's tests on a machine with
// kernelspecs installed system-wide (/usr/share/jupyter/kernels and
// /usr/local/share/jupyter/kernels, in a mount namespace of the run's
// own), in the home's Jupyter directories, and in JUPYTER_PATH,
// JUPYTER_DATA_DIR, XDG_DATA_HOME and JUPYTER_CONFIG_DIR set in the
// environment: they pass. The control, the same binary told it is
// already hermetic (so nothing is hidden), sees the planted kernelspecs.
func TestHostKernelspecsUnseen(t *testing.T) {
	testutil.RequireHermetic(t)
	systemPython(t) // without it the tests run below would skip, proving nothing
	tmp := t.TempDir()
	plant := func(kernels string, names ...string) string {
		for _, name := range names {
			argv := `["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]`
			meta := `{}`
			switch name {
			case "ir":
				argv = `["R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"]`
			case "julia-1.10":
				argv = `["/opt/julia-1.10/bin/julia", "-i", "--color=yes", "/root/.julia/packages/IJulia/kernel.jl", "{connection_file}"]`
			case "tfgpu":
				argv = `["/usr/local/bin/tfgpu-kernel", "run", "-f", "{connection_file}", "--", "/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]`
				meta = `{"tfgpu": {"version": "v0.0.1"}}`
			}
			kj := `{"argv": ` + argv + `, "display_name": "host's ` + name + `", "language": "x", "metadata": ` + meta + `}`
			writeForeign(t, kernels, name, kj, map[string]string{})
		}
		return kernels
	}
	home := filepath.Join(tmp, "home")
	plant(filepath.Join(home, ".local/share/jupyter/kernels"), hostNames...)
	host := testutil.Host{
		Dirs: map[string]string{
			"/usr/share/jupyter/kernels":       plant(filepath.Join(tmp, "usr"), hostNames...),
			"/usr/local/share/jupyter/kernels": plant(filepath.Join(tmp, "usrlocal"), hostNames...),
		},
		Env: []string{
			"HOME=" + home,
			"JUPYTER_PATH=" + filepath.Dir(plant(filepath.Join(tmp, "jupyter-path", "kernels"), "from-jupyter-path", "dup")),
			"JUPYTER_DATA_DIR=" + filepath.Dir(plant(filepath.Join(tmp, "jupyter-data", "kernels"), "from-jupyter-data", "mixed")),
			"XDG_DATA_HOME=" + filepath.Join(tmp, "xdg"),
			"JUPYTER_CONFIG_DIR=" + filepath.Join(tmp, "config"),
			"IPYTHONDIR=" + filepath.Join(tmp, "ipython"),
		},
	}
	plant(filepath.Join(tmp, "xdg", "jupyter", "kernels"), "from-xdg")

	// The control: nothing hidden, the planted kernelspecs are found.
	out, err := host.Run(t, false, "-test.run=^TestJupyterFindsNothingOfTheHost$", "-test.v")
	for _, name := range hostNames {
		if err == nil || !strings.Contains(out, "finds kernelspec "+name+" in ") {
			t.Fatalf("control, the host not hidden: jupyter_client does not find the planted %q (%v):\n%s", name, err, out)
		}
	}

	// The package's tests (but this one), the host hidden by TestMain.
	out, err = host.Run(t, true, "-test.skip=^TestHostKernelspecsUnseen$", "-test.v", "-test.timeout=5m")
	if err != nil {
		t.Fatalf("this package's tests on a host with kernelspecs %q: %v\n%s", hostNames, err, out)
	}
	var missing []string
	for _, name := range []string{"TestJupyterFindsNothingOfTheHost", "TestWrapFindSpec", "TestRunsBinary", "TestDirUserMatchesJupyter"} {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			missing = append(missing, name)
		}
	}
	if missing != nil {
		t.Errorf("%s did not pass (run, not skipped):\n%s", missing, out)
	} else if strings.Contains(out, "--- SKIP: ") {
		t.Logf("some tests skipped:\n%s", out)
	}
}
