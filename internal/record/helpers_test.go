package record

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// nobody is the uid another user's files are planted as.
const nobody = 65534

func requireRootUser(t *testing.T) {
	t.Helper()
	testutil.Integration(t)
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root (to plant files owned by another user)")
	}
}

// requireCgroupV2 returns the directory the supervisor's kernel cgroups
// would go in, once one could be made and removed there.
func requireCgroupV2(t *testing.T) string {
	t.Helper()
	testutil.Integration(t)
	o, err := cgroup.Open(cgroup.ModeV2, fmt.Sprintf("probe-%d", os.Getpid()), cgroup.Options{})
	if err != nil {
		testutil.RequireOrSkip(t, "needs a writable cgroup v2 tree: %v", err)
	}
	dir := filepath.Dir(o.Tree.Dir())
	if err := o.Tree.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func openTestDir(t *testing.T) (*Dir, string) {
	t.Helper()
	dir := testutil.PrivateDir(t)
	d, err := OpenDir(dir, false, false)
	testutil.NoErr(t, err)
	t.Cleanup(func() { d.Close() })
	return d, dir
}

// plantings are the ways a file is planted where the directory's owner's
// should be: a link to target (a file holding good), another user's file
// holding good, a FIFO.
func plantings(t *testing.T, good []byte) (plant map[string]func(path string), target string) {
	target = filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, good, 0o600)
	return map[string]func(path string){
		"link":  func(p string) { os.Symlink(target, p) },
		"other": func(p string) { os.WriteFile(p, good, 0o600); os.Chown(p, nobody, nobody) },
		"fifo":  func(p string) { syscall.Mkfifo(p, 0o600) },
	}, target
}

// checkPlanted plants each of plantings and of more at path in turn, and
// has refused read it (refused says what was wrong); with removed, the
// reader must have removed the planted file. A link's target is neither
// written nor removed.
func checkPlanted(t *testing.T, path string, good []byte, more map[string]func(path string), removed bool, refused func(how string)) {
	t.Helper()
	plant, target := plantings(t, good)
	maps.Copy(plant, more)
	for how, f := range plant {
		f(path)
		refused(how)
		if _, err := os.Lstat(path); removed && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the planted file was left: %v", how, err)
		}
		os.Remove(path)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != string(good) {
		t.Errorf("the link's target was touched: %q, %v", b, err)
	}
}
