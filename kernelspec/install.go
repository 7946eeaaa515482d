package kernelspec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrExists means the kernelspec directory exists and Replace was not set.
var ErrExists = errors.New("kernelspec already exists")

// ErrNotOurs means Uninstall found a kernelspec without metadata.tfgpu.
var ErrNotOurs = errors.New("kernelspec was not written by tfgpu-kernel")

// Result says what Install wrote.
type Result struct {
	Dir         string   // the kernelspec directory (…/kernels/NAME)
	DisplayName string   // as written into kernel.json
	Python      Python   // the interpreter in argv; with Wrap, the one that found it (may be zero)
	Wrapped     *Foreign // with Wrap: the kernelspec wrapped
}

// Install writes the kernelspec described by o and returns where it went and
// which Python it runs. See the package doc for the replace rule.
func Install(o Options) (Result, error) {
	res, files, err := plan(o)
	if err != nil {
		return Result{}, err
	}
	kernels := filepath.Dir(res.Dir)
	if err := mkdirAll(kernels); err != nil {
		return Result{}, err
	}
	// Build the new spec beside kernels/, not in it: jupyter_client lists
	// every dir in kernels/ with a valid name, and a hidden ".tfgpu.new-…"
	// left by a killed install would show up as a kernel.
	tmp, err := os.MkdirTemp(filepath.Dir(kernels), ".tfgpu-kernelspec-")
	if err != nil {
		return Result{}, fmt.Errorf("create kernelspec: %w", err)
	}
	defer os.RemoveAll(tmp) // gone after the rename; cleans up on failure
	if err := populate(tmp, files); err != nil {
		return Result{}, err
	}
	if err := swapIn(tmp, res.Dir, o.Replace); err != nil {
		return Result{}, err
	}
	return res, nil
}

// Plan is Install without writing anything: what it would write where,
// with every check Install makes (install --dry-run).
func Plan(o Options) (Result, error) {
	res, _, err := plan(o)
	return res, err
}

// plan finds the Python or the wrapped kernelspec, renders kernel.json
// and collects the files of the kernelspec o describes.
func plan(o Options) (Result, map[string]specFile, error) {
	ctx := context.Background()
	var (
		py  Python
		f   *Foreign
		err error
	)
	if o.Dest == System {
		if err := checkSystemWideInstall(o); err != nil {
			return Result{}, nil, err
		}
	}
	if o.Wrap != "" {
		var w Foreign
		if w, py, err = findWrapped(ctx, o); err != nil {
			return Result{}, nil, err
		}
		w.Python = py.Executable // "" when none was found (a directory given)
		f = &w
		if o.Name == "" {
			o.Name = WrapName(w.Name)
		}
	} else if o.Dest == System {
		if py, err = FindSystemWidePython(ctx, o.Python); err != nil {
			return Result{}, nil, err
		}
	} else if py, err = FindPython(ctx, o.Python); err != nil {
		return Result{}, nil, err
	}
	if f != nil && o.Dest == System {
		if err := checkSystemWideKernel(*f); err != nil {
			return Result{}, nil, err
		}
		if err := checkSystemWideSpec(*f); err != nil {
			return Result{}, nil, err
		}
	}
	name, err := NormalizeName(o.Name)
	if err != nil {
		return Result{}, nil, err
	}
	files := map[string]specFile{}
	var logos map[string]specFile
	var kj []byte
	if f != nil {
		if kj, err = WrapJSON(o, *f); err != nil {
			return Result{}, nil, err
		}
		var other map[string]specFile
		if logos, other, err = f.resources(o.Dest == System); err != nil {
			return Result{}, nil, err
		}
		for n, b := range other {
			files[n] = b
		}
	} else if kj, err = KernelJSON(o, py); err != nil {
		return Result{}, nil, err
	}
	if o.Dest == System {
		if err := checkSystemWidePaths(kj); err != nil {
			return Result{}, nil, err
		}
	}
	files["kernel.json"] = specFile{data: kj, mode: 0o644}
	if len(logos) == 0 {
		if logos, err = ourLogos(); err != nil {
			return Result{}, nil, err
		}
	}
	for n, b := range logos {
		files[n] = b
	}
	kernels, err := KernelsDir(o.Dest, o.Prefix, py)
	if err != nil {
		return Result{}, nil, err
	}
	dir := filepath.Join(kernels, name)
	if f != nil {
		if err := checkNotWrapped(name, dir, *f); err != nil {
			return Result{}, nil, err
		}
	}
	if _, err := os.Lstat(dir); err == nil && !o.Replace {
		return Result{}, nil, fmt.Errorf("%w: %s (use --replace to overwrite it)", ErrExists, dir)
	}
	var disp struct {
		DisplayName string `json:"display_name"`
	}
	_ = json.Unmarshal(kj, &disp) // we just encoded it
	return Result{Dir: dir, DisplayName: disp.DisplayName, Python: py, Wrapped: f}, files, nil
}

// findWrapped finds the kernelspec o.Wrap names, and the Python that found
// it (needed for a name, or for SysPrefix). That Python only has to import
// jupyter_client when it is given explicitly: the wrapped argv runs its own.
func findWrapped(ctx context.Context, o Options) (Foreign, Python, error) {
	var py Python
	byName := !isPathArg(o.Wrap)
	if byName || o.Dest == SysPrefix {
		find := FindPython
		if o.Dest == System {
			find = FindSystemWidePython // root never runs a user's program
		}
		var err error
		if py, err = find(ctx, o.Python); err != nil && (o.Python == "" || !errors.Is(err, ErrNoIPykernel)) {
			return Foreign{}, Python{}, err
		}
	}
	if !byName {
		f, err := ReadSpec(o.Wrap)
		return f, py, err
	}
	f, err := FindSpec(ctx, py, o.Wrap)
	return f, py, err
}

// checkNotWrapped keeps the wrapped kernelspec untouched and visible: the
// wrapper may neither be written over it (--replace) nor take its name,
// which would hide it from Jupyter wherever the wrapper's directory comes
// first in the search path.
func checkNotWrapped(name, dir string, f Foreign) error {
	if name == f.Name {
		return invalid(nil, "--name %q is the name of the kernelspec being wrapped: the wrapper would hide it; pick another", name)
	}
	a, errA := filepath.EvalSymlinks(dir)
	b, errB := filepath.EvalSymlinks(f.Dir)
	if dir == f.Dir || (errA == nil && errB == nil && a == b) {
		return invalid(nil, "refusing to write %s: it is the kernelspec being wrapped", dir)
	}
	return nil
}

func ourLogos() (map[string]specFile, error) {
	m := map[string]specFile{}
	for _, n := range logoFiles {
		b, err := logos.ReadFile("logos/" + n)
		if err != nil {
			return nil, fmt.Errorf("embedded logo %s: %w", n, err)
		}
		m[n] = specFile{data: b, mode: 0o644}
	}
	return m, nil
}

// mkdirAll makes dir and its missing parents 0755 whatever the umask
// (Jupyter servers of other users read --prefix and --system specs); it
// leaves the mode of directories that were there alone.
func mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("create %s: not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	} else if err == nil {
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("chmod %s: %w", dir, err)
		}
	}
	return nil
}

// specFile is a file of a kernelspec to write: its content and its mode.
type specFile struct {
	data []byte
	mode os.FileMode
}

// populate writes files into dir, 0755 / 0644 (or a copied file's own,
// narrower mode) whatever the umask, since Jupyter servers of other users
// read --prefix and --system specs.
func populate(dir string, files map[string]specFile) error {
	if err := os.Chmod(dir, 0o755); err != nil { // MkdirTemp made it 0700
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	for n, f := range files {
		mode := f.mode
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, f.data, mode); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
	}
	return nil
}

// swapIn renames the finished tmp directory to dir. rename(2) cannot
// replace a non-empty directory, so an existing dir is first moved aside and
// removed only once the new one is in place.
func swapIn(tmp, dir string, replace bool) error {
	var old string
	if _, err := os.Lstat(dir); err == nil {
		if !replace {
			return fmt.Errorf("%w: %s (use --replace to overwrite it)", ErrExists, dir)
		}
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("move old kernelspec aside: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			_ = os.Rename(old, dir) // best effort: put the old spec back
		}
		return fmt.Errorf("install kernelspec %s: %w", dir, err)
	}
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("remove old kernelspec %s: %w", old, err)
		}
	}
	return nil
}

// Uninstall removes o's kernelspec directory if its kernel.json carries
// metadata.tfgpu, and returns the directory. A missing spec is an error
// wrapping fs.ErrNotExist; someone else's spec one wrapping ErrNotOurs.
func Uninstall(o Options) (string, error) {
	if o.Dest == System && os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: --system removes from %s (run it as root)", ErrNotRoot, filepath.Join(SystemDataDir, "kernels"))
	}
	dir, err := SpecDir(context.Background(), o)
	if err != nil {
		return "", err
	}
	return dir, UninstallDir(dir)
}

// UninstallDir removes the kernelspec directory dir if its kernel.json
// carries metadata.tfgpu (Uninstall's rule, for a kernelspec found by its
// directory: RunsBinary's).
func UninstallDir(dir string) error {
	kj := filepath.Join(dir, "kernel.json")
	data, err := os.ReadFile(kj)
	if errors.Is(err, fs.ErrNotExist) {
		if _, statErr := os.Lstat(dir); errors.Is(statErr, fs.ErrNotExist) {
			return fmt.Errorf("no kernelspec at %s: %w", dir, fs.ErrNotExist)
		}
		return fmt.Errorf("refusing to remove %s: %w (it has no kernel.json)", dir, ErrNotOurs)
	}
	if err != nil {
		return fmt.Errorf("refusing to remove %s: read kernel.json: %w", dir, err)
	}
	if !isOurs(data) {
		return fmt.Errorf("refusing to remove %s: %w (no metadata.tfgpu in kernel.json)", dir, ErrNotOurs)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
