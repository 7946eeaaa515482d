package kernelspec

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// KernelsDir of User is where jupyter_core puts user data (its
// variables first, HOME's symlinks resolved); of Prefix, the cleaned
// prefix's, made absolute; an empty prefix is refused.
func TestKernelsDir(t *testing.T) {
	home := isolate(t)
	realHome := t.TempDir()
	linkHome := filepath.Join(t.TempDir(), "home-link")
	testutil.NoErr(t, os.Symlink(realHome, linkHome))
	wd, _ := os.Getwd()
	tests := []struct {
		name                                 string
		dest                                 Dest
		home, jupyterData, xdg, prefix, want string
		err                                  error
	}{
		{name: "JUPYTER_DATA_DIR wins", home: home, jupyterData: "/srv/jd", xdg: "/srv/xdg",
			want: "/srv/jd/kernels"},
		{name: "XDG_DATA_HOME", home: home, xdg: "/srv/xdg", want: "/srv/xdg/jupyter/kernels"},
		{name: "home", home: home, want: filepath.Join(home, ".local/share/jupyter/kernels")},
		{name: "home symlink resolved like get_home_dir", home: linkHome,
			want: filepath.Join(realHome, ".local/share/jupyter/kernels")},
		{name: "prefix absolute", dest: Prefix, prefix: "/opt/x", want: "/opt/x/share/jupyter/kernels"},
		{name: "prefix cleaned", dest: Prefix, prefix: "/opt/x/../y/", want: "/opt/y/share/jupyter/kernels"},
		{name: "prefix relative", dest: Prefix, prefix: "rel", want: filepath.Join(wd, "rel/share/jupyter/kernels")},
		{name: "prefix empty", dest: Prefix, prefix: "", err: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HOME", cmp.Or(tc.home, home))
			t.Setenv("JUPYTER_DATA_DIR", tc.jupyterData)
			t.Setenv("XDG_DATA_HOME", tc.xdg)
			got, err := KernelsDir(tc.dest, tc.prefix, Python{})
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("KernelsDir(%v, %q) = %q, %v; want %q, %v", tc.dest, tc.prefix, got, err, tc.want, tc.err)
			}
		})
	}
}

// TestDirUserMatchesJupyter asks the real jupyter_core where user data goes.
func TestDirUserMatchesJupyter(t *testing.T) {
	py := systemPython(t)
	home := isolate(t)
	for _, env := range [][2]string{{"", ""}, {"XDG_DATA_HOME", filepath.Join(home, "xdg")}, {"JUPYTER_DATA_DIR", filepath.Join(home, "jd")}} {
		if env[0] != "" {
			t.Setenv(env[0], env[1])
		}
		out, err := pyOutput(py.Executable, "from jupyter_core.paths import jupyter_data_dir as d; print(d())")
		if err != nil {
			testutil.RequireOrSkip(t, "jupyter_core not importable: %v", err)
		}
		got, err := UserDataDir()
		if err != nil || got != out {
			t.Errorf("%s: UserDataDir = %q, %v; jupyter_core says %q", env[0], got, err, out)
		}
	}
}

// TestDirSysPrefix uses a real virtualenv of /usr/bin/python3: its sys.prefix
// is the venv, and the venv's own python goes into argv.
func TestDirSysPrefix(t *testing.T) {
	sys := systemPython(t)
	isolate(t)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := pyCombined(sys.Executable, "-m", "venv", "--system-site-packages", "--without-pip", venv); err != nil {
		testutil.RequireOrSkip(t, "cannot create a venv (apt-get install python3-venv): %v\n%s", err, out)
	}
	vpy := filepath.Join(venv, "bin", "python3")
	o := Options{Binary: "/b/tfgpu-kernel", Python: vpy, Dest: SysPrefix}
	dir, err := SpecDir(context.Background(), o)
	if want := filepath.Join(venv, "share/jupyter/kernels/tfgpu"); err != nil || dir != want {
		t.Fatalf("SpecDir = %q, %v; want %q", dir, err, want)
	}
	res, err := Install(o)
	testutil.NoErr(t, err)
	if res.Dir != dir || res.Python.Executable != vpy || res.Python.Prefix != venv {
		t.Errorf("Install = %+v; want dir %s, python %s, prefix %s", res, dir, vpy, venv)
	}
	if _, err := Uninstall(o); err != nil {
		t.Errorf("Uninstall: %v", err)
	}
}
