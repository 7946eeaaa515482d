package kernelspec

import (
	"context"
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
	Dir    string // the kernelspec directory (…/kernels/NAME)
	Python Python // the interpreter in argv
}

// Install writes the kernelspec described by o and returns where it went and
// which Python it runs. See the package doc for the replace rule.
func Install(o Options) (Result, error) {
	ctx := context.Background()
	name, err := NormalizeName(o.Name)
	if err != nil {
		return Result{}, err
	}
	py, err := FindPython(ctx, o.Python)
	if err != nil {
		return Result{}, err
	}
	spec, err := KernelJSON(o, py)
	if err != nil {
		return Result{}, err
	}
	kernels, err := KernelsDir(o.Dest, o.Prefix, py)
	if err != nil {
		return Result{}, err
	}
	dir := filepath.Join(kernels, name)
	if _, err := os.Lstat(dir); err == nil && !o.Replace {
		return Result{}, fmt.Errorf("%w: %s (use --replace to overwrite it)", ErrExists, dir)
	}
	if err := os.MkdirAll(kernels, 0o755); err != nil {
		return Result{}, fmt.Errorf("create %s: %w", kernels, err)
	}
	// Build the new spec beside kernels/, not in it: jupyter_client lists
	// every dir in kernels/ with a valid name, and a hidden ".tfgpu.new-…"
	// left by a killed install would show up as a kernel.
	tmp, err := os.MkdirTemp(filepath.Dir(kernels), ".tfgpu-kernelspec-")
	if err != nil {
		return Result{}, fmt.Errorf("create kernelspec: %w", err)
	}
	defer os.RemoveAll(tmp) // gone after the rename; cleans up on failure
	if err := populate(tmp, spec); err != nil {
		return Result{}, err
	}
	if err := swapIn(tmp, dir, o.Replace); err != nil {
		return Result{}, err
	}
	return Result{Dir: dir, Python: py}, nil
}

// populate writes kernel.json and the logos into dir, 0755 / 0644 whatever
// the umask, since Jupyter servers of other users read --prefix specs.
func populate(dir string, spec []byte) error {
	if err := os.Chmod(dir, 0o755); err != nil { // MkdirTemp made it 0700
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	files := map[string][]byte{"kernel.json": spec}
	for _, n := range logoFiles {
		b, err := logos.ReadFile("logos/" + n)
		if err != nil {
			return fmt.Errorf("embedded logo %s: %w", n, err)
		}
		files[n] = b
	}
	for n, b := range files {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
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
	dir, err := SpecDir(context.Background(), o)
	if err != nil {
		return "", err
	}
	kj := filepath.Join(dir, "kernel.json")
	data, err := os.ReadFile(kj)
	if errors.Is(err, fs.ErrNotExist) {
		if _, statErr := os.Lstat(dir); errors.Is(statErr, fs.ErrNotExist) {
			return dir, fmt.Errorf("no kernelspec at %s: %w", dir, fs.ErrNotExist)
		}
		return dir, fmt.Errorf("refusing to remove %s: %w (it has no kernel.json)", dir, ErrNotOurs)
	}
	if err != nil {
		return dir, fmt.Errorf("refusing to remove %s: read kernel.json: %w", dir, err)
	}
	if !isOurs(data) {
		return dir, fmt.Errorf("refusing to remove %s: %w (no metadata.tfgpu in kernel.json)", dir, ErrNotOurs)
	}
	if err := os.RemoveAll(dir); err != nil {
		return dir, fmt.Errorf("remove %s: %w", dir, err)
	}
	return dir, nil
}
