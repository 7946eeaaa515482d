package kernelspec

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SearchDirs are the kernels directories jupyter_core searches on Linux,
// as far as this package knows the rule without a Python to ask: each of
// $JUPYTER_PATH's, the user data directory's, SystemDataDir's and
// /usr/share/jupyter's, in that order. A venv's or conda env's
// sys.prefix/share/jupyter is among Jupyter's too, but only its Python
// knows it (RunsBinary asks).
func SearchDirs() []string {
	var data []string
	for _, p := range filepath.SplitList(os.Getenv("JUPYTER_PATH")) {
		if p != "" {
			data = append(data, p)
		}
	}
	if d, err := UserDataDir(); err == nil {
		data = append(data, d)
	}
	data = append(data, SystemDataDir, "/usr/share/jupyter")
	var out []string
	for _, d := range data {
		if abs, err := filepath.Abs(filepath.Join(d, "kernels")); err == nil && !slices.Contains(out, abs) {
			out = append(out, abs)
		}
	}
	return out
}

// RunsBinary lists the kernelspecs of ours whose argv[0] is bin (the same
// file, or the same path when it is gone): what stops working when bin is
// removed, --wrap twins included. It looks in the kernels directories
// each of pythons' jupyter_client searches (KernelSpecManager.kernel_dirs,
// their sys.prefix included; a Python that does not answer, or that root
// may not run, is passed over), then SearchDirs and extra; each
// kernelspec once, in that order. kernel.json is read here, not by the
// Python, and only as a regular file.
func RunsBinary(ctx context.Context, bin string, pythons []string, extra ...string) []Spec {
	var dirs []string
	for _, py := range pythons {
		if l, err := list(ctx, py); err == nil {
			dirs = append(dirs, l.Dirs...)
		}
	}
	dirs = append(append(dirs, SearchDirs()...), extra...)
	var out []Spec
	var seen []os.FileInfo
	for _, k := range dirs {
		ents, err := os.ReadDir(k)
		if err != nil {
			continue // most of Jupyter's directories do not exist
		}
		for _, e := range ents {
			d := filepath.Join(k, e.Name())
			fi, err := os.Stat(d)
			if err != nil || !fi.IsDir() || slices.ContainsFunc(seen, func(s os.FileInfo) bool { return os.SameFile(s, fi) }) {
				continue
			}
			seen = append(seen, fi)
			data, _, err := readRegular(filepath.Join(d, "kernel.json"))
			if err != nil || !isOurs(data) {
				continue
			}
			var s struct{ Argv []string }
			if json.Unmarshal(data, &s) != nil || len(s.Argv) == 0 || !sameProgram(s.Argv[0], bin) {
				continue
			}
			sp := Spec{Name: strings.ToLower(e.Name()), Dir: d, Argv: s.Argv}
			if i := slices.Index(s.Argv, "--"); i >= 0 && i+1 < len(s.Argv) {
				sp.Kernel = s.Argv[i+1]
			}
			out = append(out, sp)
		}
	}
	return out
}

// sameProgram says a and b name one program: the same path, or the same
// file through links.
func sameProgram(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
