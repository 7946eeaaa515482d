package kernelspec

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestIpykernelArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"ipykernel 7", []string{"/v/bin/python", "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"}, "-Xfrozen_modules=off"},
		{"ipykernel 6.17", []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"}, ""},
		{"two -X", []string{"p", "-Xfrozen_modules=off", "-Xutf8", "-m", "ipykernel_launcher"}, "-Xfrozen_modules=off -Xutf8"},
		{"anything but -X is not taken", []string{"p", "-Xutf8", "-c", "evil", "-m", "x"}, ""},
		{"no -m", []string{"p", "-Xutf8"}, ""},
		{"a value with a space", []string{"p", "-Xa=b c", "-m", "x"}, ""},
		{"empty", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(ipykernelArgs(tc.argv), " "); got != tc.want {
				t.Errorf("ipykernelArgs(%q) = %q, want %q", tc.argv, got, tc.want)
			}
		})
	}
}

// Advice goes to the Python that lacks ipykernel: a venv's own pip, conda
// for a conda env, Debian's packages only for Debian's own Python.
func TestInstallAdvice(t *testing.T) {
	old := debianHost
	debianHost = func() bool { return true }
	defer func() { debianHost = old }()
	for _, tc := range []struct {
		name string
		py   Python
		want string
	}{
		{"venv", Python{Executable: "/home/a/venv/bin/python3", Prefix: "/home/a/venv", BasePrefix: "/usr"}, "/home/a/venv/bin/python3 -m pip install ipykernel"},
		{"venv made from Debian's Python", Python{Executable: "/opt/v/bin/python3", Prefix: "/opt/v", BasePrefix: "/usr"}, "/opt/v/bin/python3 -m pip install ipykernel"},
		{"conda", Python{Executable: "/opt/conda/envs/tf/bin/python", Prefix: "/opt/conda/envs/tf", BasePrefix: "/opt/conda", Conda: true}, "conda install -p /opt/conda/envs/tf ipykernel"},
		{"pyenv", Python{Executable: "/root/.pyenv/versions/3.11.7/bin/python3", Prefix: "/root/.pyenv/versions/3.11.7", BasePrefix: "/root/.pyenv/versions/3.11.7"}, "/root/.pyenv/versions/3.11.7/bin/python3 -m pip install ipykernel"},
		{"Debian's", Python{Executable: "/usr/bin/python3", Prefix: "/usr", BasePrefix: "/usr"}, "apt-get install python3-ipykernel"},
		{"a path with a space", Python{Executable: "/home/a b/v/bin/python3", Prefix: "/home/a b/v", BasePrefix: "/usr"}, `'/home/a b/v/bin/python3' -m pip install ipykernel`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.py.InstallAdvice()
			if !strings.Contains(got, tc.want) {
				t.Errorf("InstallAdvice = %q, want %q", got, tc.want)
			}
			if tc.py.Env() && strings.Contains(got, "apt") {
				t.Errorf("apt for an environment: %q", got)
			}
		})
	}
}

// probeJSON is a fake Python's answer to the probe.
func probeJSON(exe, prefix, base, ipk string) string {
	j := `{"executable":"` + exe + `","prefix":"` + prefix + `","base_prefix":"` + base + `","version":"3.11.2"`
	if ipk != "" {
		j += `,"ipykernel":"` + ipk + `"`
	} else {
		j += `,"error":"ModuleNotFoundError: No module named 'ipykernel'"`
	}
	return `echo '` + j + `}'`
}

// The Python choice without --python: a venv (or conda env) first on PATH
// is the user's choice and is never passed over for another Python, and
// apt is offered only where Debian's own Python would be used.
func TestFindPythonChoosesAsTheUserWould(t *testing.T) {
	oldFallback, oldDebian := FallbackPython, debianHost
	defer func() { FallbackPython, debianHost = oldFallback, oldDebian }()
	debianHost = func() bool { return true }
	dir := t.TempDir()
	sysWith := fakePython(t, dir, "sys-with", probeJSON("/usr/bin/python3", "/usr", "/usr", "6.17.0"))
	sysWithout := fakePython(t, dir, "sys-without", probeJSON("/usr/bin/python3", "/usr", "/usr", ""))
	for _, tc := range []struct {
		name, onPath, fallback string
		want                   string // the Python chosen, or "" for an error
		wantErr                []string
		wantApt                bool
	}{
		{name: "a venv with ipykernel on PATH", onPath: probeJSON("/v/bin/python3", "/v", "/usr", "7.4.0"), fallback: sysWith, want: "/v/bin/python3"},
		{name: "a venv without it stops the search", onPath: probeJSON("/v/bin/python3", "/v", "/usr", ""), fallback: sysWith,
			wantErr: []string{"python3 on PATH is the virtual environment /v", "/v/bin/python3 -m pip install ipykernel", "--python"}},
		{name: "a conda env without it", onPath: `echo '{"executable":"/c/bin/python3","prefix":"/c","base_prefix":"/c","conda":true,"error":"no"}'`, fallback: sysWith,
			wantErr: []string{"conda environment /c", "conda install -p /c ipykernel"}},
		{name: "a plain python3 without it falls back", onPath: probeJSON("/p/bin/python3", "/p", "/p", ""), fallback: sysWith, want: "/usr/bin/python3"},
		{name: "neither has it: apt for Debian's, pip for the other", onPath: probeJSON("/p/bin/python3", "/p", "/p", ""), fallback: sysWithout,
			wantErr: []string{"/p/bin/python3 -m pip install ipykernel", "apt-get install python3-ipykernel"}, wantApt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			fakePython(t, bin, "python3", tc.onPath)
			t.Setenv("PATH", bin)
			FallbackPython = tc.fallback
			py, err := FindPython(context.Background(), "")
			if tc.want != "" {
				if err != nil || py.Executable != tc.want {
					t.Fatalf("FindPython = %q, %v; want %s", py.Executable, err, tc.want)
				}
				return
			}
			var np *NoPythonError
			if !errors.As(err, &np) || !errors.Is(err, ErrNoIPykernel) || np.Apt != tc.wantApt {
				t.Fatalf("FindPython = %+v, %v; want a NoPythonError, Apt %v", py, err, tc.wantApt)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !tc.wantApt && strings.Contains(err.Error(), "apt") {
				t.Errorf("apt offered: %v", err)
			}
		})
	}

	// Given explicitly: a venv's python is probed as it is, never resolved
	// through its link to the interpreter it was made from.
	FallbackPython = oldFallback
	venvPy := fakePython(t, dir, "venv-python3", probeJSON(dir+"/venv-python3", dir, "/usr", ""))
	_, err := FindPython(context.Background(), venvPy)
	var np *NoPythonError
	if !errors.As(err, &np) || np.Apt || !strings.Contains(err.Error(), venvPy+" -m pip install ipykernel") {
		t.Errorf("FindPython(%s) = %v", venvPy, err)
	}
}
