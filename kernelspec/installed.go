package kernelspec

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// Spec is an installed kernelspec of ours, as `tfgpu-kernel doctor`
// reports it.
type Spec struct {
	Name string
	Dir  string
	Argv []string
	// Kernel is the kernel's program: the argv element after "--".
	Kernel string
}

// listScript prints every kernelspec py's jupyter_client finds, as one
// JSON line: name → {dir, argv, ours}.
const listScript = `import json, os, sys
try:
    from jupyter_client.kernelspec import KernelSpecManager
except Exception as e:
    sys.stdout.write("\n" + json.dumps({"error": "cannot import jupyter_client: %s: %s" % (type(e).__name__, e)}) + "\n")
    sys.exit(0)
r = {}
for name, d in KernelSpecManager().find_kernel_specs().items():
    try:
        with open(os.path.join(d, "kernel.json")) as f:
            spec = json.load(f)
    except Exception:
        continue
    r[name] = {"dir": d, "argv": spec.get("argv", []), "ours": isinstance(spec.get("metadata", {}).get("tfgpu"), dict)}
sys.stdout.write("\n" + json.dumps({"specs": r}) + "\n")
`

// Installed lists the kernelspecs of ours that py's jupyter_client finds
// (JUPYTER_PATH, the user data dir, sys.prefix and the system dirs, in
// Jupyter's order), sorted by name.
func Installed(ctx context.Context, py Python) ([]Spec, error) {
	line, err := runScript(ctx, py.Executable, listScript)
	if err != nil {
		return nil, fmt.Errorf("list kernelspecs with python %s: %s", py.Executable, oneLine(err.Error()))
	}
	var r struct {
		Error string `json:"error"`
		Specs map[string]struct {
			Dir  string   `json:"dir"`
			Argv []string `json:"argv"`
			Ours bool     `json:"ours"`
		} `json:"specs"`
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil || r.Error != "" {
		return nil, fmt.Errorf("list kernelspecs with python %s: %s", py.Executable, oneLine(r.Error+line))
	}
	var out []Spec
	for name, s := range r.Specs {
		if !s.Ours {
			continue
		}
		sp := Spec{Name: name, Dir: s.Dir, Argv: s.Argv}
		if i := slices.Index(s.Argv, "--"); i >= 0 && i+1 < len(s.Argv) {
			sp.Kernel = s.Argv[i+1]
		}
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b Spec) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}
