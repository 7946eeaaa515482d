package doctor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/kernelspec"
	"github.com/tfgpu/tfgpu-kernel/wrapper/spare"
)

// All is every finding of `tfgpu-kernel doctor`, in the order it says
// them: the host (Host), the GPU (GPU), the handoffs (Handoffs), the spare
// kernels of kernels' records, and the tfgpu kernelspecs Jupyter finds.
func All(stateDir, nvmlLibrary string, allUsers bool, kernels func() ([]record.State, []error, error)) []Finding {
	findings := append(Host(stateDir, allUsers, kernels), GPU(nvmlLibrary)...)
	findings = append(findings, Handoffs(stateDir, nvmlLibrary)...)
	if states, _, err := kernels(); err == nil {
		findings = append(findings, spareFindings(states)...)
	}
	return append(findings, kernelspecFindings()...)
}

// kernelspecFindings reports the tfgpu kernelspecs Jupyter finds, and for
// each the Python and ipykernel it runs.
func kernelspecFindings() []Finding {
	ctx := context.Background()
	py, err := kernelspec.FindPython(ctx, "")
	if err != nil {
		return []Finding{{Topic: "kernelspecs", Problem: true, Text: "cannot look: " + err.Error(),
			Fix: "apt-get install python3-jupyter-client python3-ipykernel (or ./install.sh)"}}
	}
	specs, err := kernelspec.Installed(ctx, py)
	switch {
	case err != nil:
		return []Finding{{Topic: "kernelspecs", Problem: true, Text: err.Error(),
			Fix: "apt-get install python3-jupyter-client (or ./install.sh)"}}
	case len(specs) == 0:
		return []Finding{{Topic: "kernelspecs", Problem: true,
			Text: "no tfgpu kernelspec in Jupyter's paths (as " + py.Executable + "'s jupyter_client sees them)",
			Fix:  "tfgpu-kernel install (or ./install.sh)"}}
	}
	var out []Finding
	for _, sp := range specs {
		f := Finding{Topic: "kernelspec", Text: fmt.Sprintf("%s in %s", sp.Name, sp.Dir)}
		switch {
		case kernelspec.IsLauncherArgv(sp.Argv):
			f = launcherFinding(ctx, sp, f)
		case len(sp.Argv) == 0:
			f.Problem, f.Text, f.Fix = true, f.Text+": no argv", "tfgpu-kernel install --replace --name "+sp.Name
		case !executable(sp.Argv[0]):
			f.Problem, f.Text = true, f.Text+": its supervisor "+sp.Argv[0]+" is missing or not executable"
			f.Fix = "tfgpu-kernel install --replace --name " + sp.Name
		case sp.Kernel == "":
			f.Text += ", kernel: none after --"
		default:
			kpy, err := kernelspec.ProbePython(ctx, sp.Kernel)
			switch {
			case errors.Is(err, kernelspec.ErrNotRootsProgram):
				// Root never runs a program another user could change
				// (docs/security.md): that user's doctor checks it.
				f.Text += ", kernel " + sp.Kernel + ": not run as root (" + err.Error() + "); its owner's 'tfgpu-kernel doctor' checks it"
			case err != nil && kpy.Executable == "":
				f.Text += ", kernel " + sp.Kernel // not a Python (a wrapped R or Julia kernel)
			case err != nil:
				f.Problem, f.Text = true, fmt.Sprintf("%s: Python %s %s cannot import ipykernel", f.Text, kpy.Version, kpy.Executable)
				f.Fix = kpy.InstallAdvice()
			default:
				f.Text += fmt.Sprintf(", Python %s %s, ipykernel %s", kpy.Version, kpy.Executable, kpy.IPykernel)
			}
			f.Text += ", " + SpareSetting(sp.Argv)
		}
		out = append(out, f)
		if len(sp.Hides) > 0 {
			out = append(out, hidingFinding(sp))
		}
	}
	return out
}

// launcherFinding checks the wheel's kernelspec (docs/design.md#the-wheel):
// its launcher runs PREFIX/bin/tfgpu-kernel, pip's script beside the
// kernelspec's share/jupyter, with the Jupyter server's Python, whose
// ipykernel is PREFIX/bin/python's when the server runs from that
// environment; its settings are PREFIX/etc/jupyter/tfgpu-kernel.json.
func launcherFinding(ctx context.Context, sp kernelspec.Spec, f Finding) Finding {
	prefix := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(sp.Dir))))
	bin := filepath.Join(prefix, "bin", "tfgpu-kernel")
	if !executable(bin) {
		f.Problem, f.Text = true, f.Text+" (the tfgpu-kernel wheel's): its supervisor "+bin+" is missing or not executable"
		f.Fix = "pip install --force-reinstall tfgpu-kernel, with " + filepath.Join(prefix, "bin", "python")
		return f
	}
	f.Text += " (the tfgpu-kernel wheel's, " + bin + ")"
	py := filepath.Join(prefix, "bin", "python")
	switch kpy, err := kernelspec.ProbePython(ctx, py); {
	case errors.Is(err, kernelspec.ErrNotRootsProgram):
		f.Text += ", the server's Python: " + py + " not run as root (" + err.Error() + "); its owner's 'tfgpu-kernel doctor' checks it"
	case kpy.Executable == "":
		f.Text += ", the Jupyter server's Python (as \"Python 3\")"
	case err != nil:
		f.Problem, f.Text = true, fmt.Sprintf("%s: Python %s %s cannot import ipykernel", f.Text, kpy.Version, kpy.Executable)
		f.Fix = kpy.InstallAdvice()
		return f
	default:
		f.Text += fmt.Sprintf(", the server's Python: %s %s with ipykernel %s", kpy.Version, kpy.Executable, kpy.IPykernel)
	}
	path := kernelspec.SettingsPath(sp.Dir)
	set, err := kernelspec.ReadSettings(path)
	if err != nil {
		f.Problem, f.Text = true, f.Text+": its settings "+record.Printable(err.Error())
		f.Fix = "tfgpu-kernel install --prefix " + prefix + " --replace --reset (and the settings again)"
		return f
	}
	flags := []string{}
	if set != nil {
		flags = set.RunFlags
		words := slices.Clone(flags)
		for _, k := range slices.Sorted(maps.Keys(set.Env)) {
			words = append(words, "--env "+k+"="+set.Env[k])
		}
		f.Text += ", settings in " + path + ": " + record.Printable(strings.Join(words, " "))
	}
	argv := append(append([]string{bin, "run"}, flags...), "-f", "{connection_file}", "--", py, "-m", "ipykernel_launcher", "-f", "{connection_file}")
	f.Text += ", " + SpareSetting(argv)
	return f
}

// hidingFinding says that sp hides kernelspecs of the same name in
// Jupyter's later directories (#34: root's install without --system
// wrote a root's own "tfgpu" that hid the one for every user): Jupyter
// lists and starts only sp, whichever was meant.
func hidingFinding(sp kernelspec.Spec) Finding {
	f := Finding{Topic: "kernelspec", Problem: true,
		Text: fmt.Sprintf("%s in %s hides %s of the same name: your Jupyter lists and starts only the first", sp.Name, sp.Dir, strings.Join(sp.Hides, ", ")),
		Fix:  "remove the one you do not mean, or install it under another --name"}
	if user, err := kernelspec.UserDataDir(); err == nil && filepath.Dir(sp.Dir) == filepath.Join(user, "kernels") {
		f.Fix = "tfgpu-kernel install --uninstall --name " + sp.Name + " removes yours (or install yours under another --name)"
	}
	return f
}

// SpareSetting says whether a kernelspec's restarts use a spare kernel
// (docs/design.md#spare-kernel): its run flags, and its kernel's shape.
// TFGPU_SPARE in the server's environment is not seen from here.
func SpareSetting(argv []string) string {
	i := slices.Index(argv, "--")
	if i < 0 {
		return "spare kernel: ?"
	}
	preload := ""
	for j := 1; j < i; j++ {
		a := argv[j]
		switch {
		case a == "--no-spare" || a == "--no-spare=true" || a == "--spare=false" || a == "--spare=0":
			return "no spare kernel (" + a + ")"
		case a == "--preload" && j+1 < i:
			preload = argv[j+1]
		case strings.HasPrefix(a, "--preload="):
			preload = strings.TrimPrefix(a, "--preload=")
		}
	}
	if _, ok := spare.Parse(argv[i+1:]); !ok {
		return "no spare kernel (its kernel is not PYTHON -m ipykernel_launcher)"
	}
	if preload != "" {
		return "spare kernel on, preloading " + preload
	}
	return "spare kernel on"
}

// spareFindings reports the spare kernels kept for the kernels of states
// and their memory (Census: the spares, their standbys and the standbys'
// watchers), and the kernels that keep none for a reason found at run time
// (a spare that held a GPU context).
func spareFindings(states []record.State) []Finding {
	var ready, off []string
	var rss int64
	for _, k := range record.Census(states, nil) {
		switch sp := k.Spare; {
		case sp == nil:
		case sp.Off != "":
			off = append(off, record.ShortID(k.State.KernelID)+": "+record.Printable(sp.Off))
		default:
			ready = append(ready, record.ShortID(k.State.KernelID))
			rss += k.RSS(record.SpareRoles...)
		}
	}
	var out []Finding
	if len(ready) > 0 {
		out = append(out, Finding{Topic: "spares", Text: fmt.Sprintf("%d of %d kernels keep a spare kernel for their next restart (%s resident with their standby supervisors; --no-spare saves it)",
			len(ready), len(states), gpu.FormatBytes(rss))})
	}
	for _, o := range off {
		out = append(out, Finding{Topic: "spares", Text: "no spare kernel for " + o + "; its restarts start cold",
			Fix: "take the module that initialises CUDA on import out of --preload"})
	}
	return out
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
