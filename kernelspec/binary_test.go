package kernelspec

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// RunsBinary finds the kernelspecs of ours whose argv[0] is the binary, by
// path or through a link, in Jupyter's directories as SearchDirs has them
// (no Python asked), each once however many directories lead to it; not
// someone else's that runs it, nor ours that runs another binary.
func TestRunsBinary(t *testing.T) {
	home := isolate(t)
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin", "tfgpu-kernel")
	testutil.NoErr(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	testutil.NoErr(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	link := filepath.Join(tmp, "link")
	testutil.NoErr(t, os.Symlink(bin, link))
	old := SystemDataDir
	SystemDataDir = filepath.Join(tmp, "system")
	t.Cleanup(func() { SystemDataDir = old })
	jp := filepath.Join(tmp, "jp")
	user := filepath.Join(home, ".local", "share", "jupyter", "kernels")

	ours := func(argv0 string) string {
		return `{"argv": ["` + argv0 + `", "run", "-f", "{connection_file}", "--", "/usr/bin/python3"], "metadata": {"tfgpu": {"version": "dev"}}}`
	}
	for dir, kj := range map[string]string{
		filepath.Join(user, "tfgpu"):                      ours(bin),
		filepath.Join(jp, "kernels", "python3-tfgpu"):     ours(link),
		filepath.Join(SystemDataDir, "kernels", "tfgpu"):  ours("/usr/local/bin/tfgpu-kernel"),
		filepath.Join(user, "theirs"):                     `{"argv": ["` + bin + `", "-f", "{connection_file}"]}`,
		filepath.Join(SystemDataDir, "kernels", "broken"): `{"argv": [`,
	} {
		testutil.NoErr(t, os.MkdirAll(dir, 0o755))
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, "kernel.json"), []byte(kj), 0o644))
	}
	// jp twice, and the user's data directory through a link, searched
	// first: each kernelspec once, where Jupyter would find it first.
	testutil.NoErr(t, os.Symlink(filepath.Dir(user), filepath.Join(tmp, "again")))
	t.Setenv("JUPYTER_PATH", strings.Join([]string{jp, filepath.Join(tmp, "again"), jp}, string(os.PathListSeparator)))

	var got []string
	for _, sp := range RunsBinary(context.Background(), bin, nil) {
		got = append(got, sp.Name+" "+sp.Dir+" "+sp.Kernel)
	}
	want := []string{
		"python3-tfgpu " + filepath.Join(jp, "kernels", "python3-tfgpu") + " /usr/bin/python3",
		"tfgpu " + filepath.Join(tmp, "again", "kernels", "tfgpu") + " /usr/bin/python3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("RunsBinary = %q, want %q", got, want)
	}
}
