package kernelspec

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Spec is an installed kernelspec of ours, as `tfgpu-kernel doctor`
// reports it.
type Spec struct {
	Name string
	Dir  string
	Argv []string
	// Kernel is the kernel's program: the argv element after "--".
	Kernel string
	// Hides are the other kernelspec directories of the same name in
	// Jupyter's later kernels directories (a user's own "tfgpu" hides a
	// system or sys-prefix one): Jupyter lists and starts this one only.
	Hides []string
}

// listScript prints every kernelspec py's jupyter_client finds, as one
// JSON line: name → {dir, argv, ours}, and the kernels directories it
// searches, in its order (KernelSpecManager.kernel_dirs).
const listScript = `import json, os, sys
try:
    from jupyter_client.kernelspec import KernelSpecManager
except Exception as e:
    sys.stdout.write("\n" + json.dumps({"error": "cannot import jupyter_client: %s: %s" % (type(e).__name__, e)}) + "\n")
    sys.exit(0)
m = KernelSpecManager()
r = {}
for name, d in m.find_kernel_specs().items():
    try:
        with open(os.path.join(d, "kernel.json")) as f:
            spec = json.load(f)
    except Exception:
        continue
    r[name] = {"dir": d, "argv": spec.get("argv", []), "ours": isinstance(spec.get("metadata", {}).get("tfgpu"), dict)}
sys.stdout.write("\n" + json.dumps({"specs": r, "dirs": [str(d) for d in m.kernel_dirs]}) + "\n")
`

// Installed lists the kernelspecs of ours that py's jupyter_client finds
// (JUPYTER_PATH, the user data dir, sys.prefix and the system dirs, in
// Jupyter's order), sorted by name, each with the kernelspecs it hides.
func Installed(ctx context.Context, py Python) ([]Spec, error) {
	l, err := list(ctx, py.Executable)
	if err != nil {
		return nil, err
	}
	var out []Spec
	for name, s := range l.Specs {
		if !s.Ours {
			continue
		}
		sp := Spec{Name: name, Dir: s.Dir, Argv: s.Argv, Hides: hidden(l.Dirs, name, s.Dir)}
		if i := slices.Index(s.Argv, "--"); i >= 0 && i+1 < len(s.Argv) {
			sp.Kernel = s.Argv[i+1]
		}
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listing is what listScript prints.
type listing struct {
	Error string   `json:"error"`
	Dirs  []string `json:"dirs"`
	Specs map[string]struct {
		Dir  string   `json:"dir"`
		Argv []string `json:"argv"`
		Ours bool     `json:"ours"`
	} `json:"specs"`
}

func list(ctx context.Context, python string) (listing, error) {
	line, err := runScript(ctx, python, listScript)
	if err != nil {
		return listing{}, fmt.Errorf("list kernelspecs with python %s: %s", python, oneLine(err.Error()))
	}
	var l listing
	if err := json.Unmarshal([]byte(line), &l); err != nil || l.Error != "" {
		return listing{}, fmt.Errorf("list kernelspecs with python %s: %s", python, oneLine(l.Error+line))
	}
	return l, nil
}

// hidden are the directories of kernelspec name in the kernels
// directories dirs other than found, the one Jupyter found first.
func hidden(dirs []string, name, found string) []string {
	var out []string
	for _, k := range dirs {
		d := filepath.Join(k, name)
		if d == filepath.Clean(found) || sameDir(d, found) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(d, "kernel.json")); err == nil && fi.Mode().IsRegular() && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// sameDir says a and b are one directory (a link, a bind mount).
func sameDir(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
