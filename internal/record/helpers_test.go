package record

import (
	"fmt"
	"os"
	"path/filepath"
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
