package kernelspec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// UserDataDir is jupyter_core.paths.jupyter_data_dir() for Linux:
// $JUPYTER_DATA_DIR if set, else ${XDG_DATA_HOME:-~/.local/share}/jupyter,
// where ~ is $HOME with symlinks resolved (get_home_dir uses Path.resolve).
func UserDataDir() (string, error) {
	if d := os.Getenv("JUPYTER_DATA_DIR"); d != "" {
		return filepath.Abs(d)
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Abs(filepath.Join(x, "jupyter"))
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("jupyter data dir: %w", err)
	}
	// Path.resolve() is non-strict: a home that does not exist stays as is.
	if r, err := filepath.EvalSymlinks(home); err == nil {
		home = r
	}
	return filepath.Abs(filepath.Join(home, ".local", "share", "jupyter"))
}

// SystemDataDir is the first of jupyter_core's SYSTEM_JUPYTER_PATH on
// Linux, searched by every user's Jupyter (after their own and their
// environment's): `jupyter kernelspec install` and `ipykernel install`
// without --user write here too.
var SystemDataDir = "/usr/local/share/jupyter"

// KernelsDir returns the kernels directory (the parent of NAME) for dest.
// py is consulted only for SysPrefix; prefix only for Prefix.
func KernelsDir(dest Dest, prefix string, py Python) (string, error) {
	var data string
	switch dest {
	case User:
		d, err := UserDataDir()
		if err != nil {
			return "", err
		}
		data = d
	case SysPrefix:
		if py.Prefix == "" {
			return "", fmt.Errorf("%w: sys.prefix of python %q unknown", ErrInvalid, py.Executable)
		}
		data = filepath.Join(py.Prefix, "share", "jupyter")
	case System:
		data = SystemDataDir
	case Prefix:
		if prefix == "" {
			return "", fmt.Errorf("%w: --prefix needs a directory", ErrInvalid)
		}
		abs, err := filepath.Abs(prefix)
		if err != nil {
			return "", fmt.Errorf("prefix %s: %w", prefix, err)
		}
		data = filepath.Join(abs, "share", "jupyter")
	default:
		return "", fmt.Errorf("%w: %v", ErrInvalid, dest)
	}
	return filepath.Join(data, "kernels"), nil
}

// SpecDir returns where o's kernelspec lives (with Wrap and no Name, the
// wrapper's default name). For SysPrefix it asks the Python (o.Python, or
// FindPython's choice) for sys.prefix; a Python without ipykernel still
// answers, so a spec can be located to be uninstalled.
func SpecDir(ctx context.Context, o Options) (string, error) {
	if o.Name == "" && o.Wrap != "" {
		o.Name = WrapName(o.Wrap)
	}
	name, err := NormalizeName(o.Name)
	if err != nil {
		return "", err
	}
	var py Python
	if o.Dest == SysPrefix {
		if py, err = FindPython(ctx, o.Python); err != nil && (o.Python == "" || !errors.Is(err, ErrNoIPykernel)) {
			return "", err
		}
	}
	kernels, err := KernelsDir(o.Dest, o.Prefix, py)
	if err != nil {
		return "", err
	}
	return filepath.Join(kernels, name), nil
}
