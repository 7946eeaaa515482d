package kernelspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// fakeIPython is a fake interpreter that answers the probe instantly, so
// install tests do not depend on (or wait for) a real ipykernel.
func fakeIPython(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "python3")
	return fakePython(t, dir, "python3",
		`echo '{"executable":"`+p+`","prefix":"`+dir+`","ipykernel":"6.17.0"}'`)
}

func TestInstallFiles(t *testing.T) {
	prefix := t.TempDir()
	py := fakeIPython(t)
	old := mask(t, 0o077) // files must still be 0644 under a strict umask
	defer mask(t, old)
	res, err := Install(Options{Binary: "/b/tfgpu-kernel", Python: py, Dest: Prefix, Prefix: prefix})
	testutil.NoErr(t, err)
	if want := filepath.Join(prefix, "share/jupyter/kernels/tfgpu"); res.Dir != want || res.Python.Executable != py {
		t.Fatalf("Install = %+v, want dir %s python %s", res, want, py)
	}
	if got := testutil.DirNames(t, res.Dir); !slices.Equal(got, []string{"kernel.json", "logo-32x32.png", "logo-64x64.png"}) {
		t.Errorf("files = %q", got)
	}
	if got := testutil.DirNames(t, filepath.Join(prefix, "share/jupyter")); !slices.Equal(got, []string{"kernels"}) {
		t.Errorf("leftovers beside kernels/: %q", got)
	}
	checkMode(t, res.Dir, 0o755|fs.ModeDir)
	for _, f := range []string{"kernel.json", "logo-32x32.png", "logo-64x64.png"} {
		checkMode(t, filepath.Join(res.Dir, f), 0o644)
	}
	if png := readFile(t, filepath.Join(res.Dir, "logo-64x64.png")); !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("logo is not a PNG")
	}
	var spec struct{ Argv []string }
	if err := json.Unmarshal(readFile(t, filepath.Join(res.Dir, "kernel.json")), &spec); err != nil || spec.Argv[5] != py {
		t.Errorf("kernel.json argv = %q, %v", spec.Argv, err)
	}
}

func TestInstallUserDir(t *testing.T) {
	isolate(t)
	jd := filepath.Join(t.TempDir(), "jd")
	t.Setenv("JUPYTER_DATA_DIR", jd)
	res, err := Install(Options{Name: "My.Spec", Binary: "/b/tfgpu-kernel", Python: fakeIPython(t)})
	if want := filepath.Join(jd, "kernels", "my.spec"); err != nil || res.Dir != want {
		t.Errorf("Install = %q, %v; want %q", res.Dir, err, want)
	}
}

func TestInstallReplace(t *testing.T) {
	prefix := t.TempDir()
	o := Options{Binary: "/b/tfgpu-kernel", Python: fakeIPython(t), Dest: Prefix, Prefix: prefix}
	res, err := Install(o)
	testutil.NoErr(t, err)
	stale := filepath.Join(res.Dir, "stale.txt")
	testutil.NoErr(t, os.WriteFile(stale, nil, 0o644))
	o.DisplayName = "second"
	if _, err := Install(o); !errors.Is(err, ErrExists) || !bytes.Contains([]byte(err.Error()), []byte("--replace")) {
		t.Fatalf("second Install err = %v, want ErrExists mentioning --replace", err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("refused install touched the old spec: %v", err)
	}
	o.Replace = true
	for i := 0; i < 2; i++ { // idempotent
		if _, err := Install(o); err != nil {
			t.Fatalf("Install with Replace #%d: %v", i, err)
		}
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("replace kept a stale file: %v", err)
	}
	if !bytes.Contains(readFile(t, filepath.Join(res.Dir, "kernel.json")), []byte(`"second"`)) {
		t.Errorf("kernel.json not replaced")
	}
	if got := testutil.DirNames(t, filepath.Join(prefix, "share/jupyter")); !slices.Equal(got, []string{"kernels"}) {
		t.Errorf("leftovers beside kernels/: %q", got)
	}
}

func TestInstallUninstallSafety(t *testing.T) {
	prefix := t.TempDir()
	kernels := filepath.Join(prefix, "share/jupyter/kernels")
	o := Options{Binary: "/b/tfgpu-kernel", Python: fakeIPython(t), Dest: Prefix, Prefix: prefix}

	if _, err := Uninstall(o); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Uninstall of a missing spec: %v, want ErrNotExist", err)
	}

	foreign := filepath.Join(kernels, "python3")
	testutil.NoErr(t, os.MkdirAll(foreign, 0o755))
	if err := os.WriteFile(filepath.Join(foreign, "kernel.json"),
		[]byte(`{"argv":["python3","-m","ipykernel_launcher","-f","{connection_file}"],"display_name":"Python 3","language":"python"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	oo := o
	oo.Name = "python3"
	if _, err := Uninstall(oo); !errors.Is(err, ErrNotOurs) {
		t.Errorf("Uninstall of a foreign spec: %v, want ErrNotOurs", err)
	}
	testutil.NoErr(t, os.Remove(filepath.Join(foreign, "kernel.json")))
	if _, err := Uninstall(oo); !errors.Is(err, ErrNotOurs) {
		t.Errorf("Uninstall of a dir without kernel.json: %v, want a refusal", err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("foreign spec was removed: %v", err)
	}

	res, err := Install(o)
	testutil.NoErr(t, err)
	dir, err := Uninstall(o)
	if err != nil || dir != res.Dir {
		t.Fatalf("Uninstall = %q, %v", dir, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("spec still there: %v", err)
	}
}

func TestInstallInvalid(t *testing.T) {
	tests := []struct {
		name string
		o    Options
	}{
		{"bad name", Options{Name: "a b", Binary: "/b"}},
		{"relative binary", Options{Binary: "tfgpu-kernel"}},
		{"prefix without dir", Options{Binary: "/b", Dest: Prefix}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Python = fakeIPython(t)
			if _, err := Install(tc.o); !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func checkMode(t *testing.T, p string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(p)
	testutil.NoErr(t, err)
	if fi.Mode() != want {
		t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
	}
}
