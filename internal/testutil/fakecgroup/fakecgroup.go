// Package fakecgroup makes cgroup2 trees under a test's temporary
// directory for what reads memory limits (cgroup.NewOuterMemory): the
// notes a kernel's first cell gets and doctor's findings inside a job or
// a container.
package fakecgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
)

// MemoryV2 makes a cgroup2 tree with memory.max of each directory of
// limits ("max" or bytes) and self, the supervisor's cgroup (made when
// limits does not name it), with its memory.events; it returns the layout
// a supervisor in self would detect.
func MemoryV2(t testing.TB, limits map[string]string, self string) cgroup.Layout {
	t.Helper()
	root := t.TempDir()
	write := func(dir, name, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for dir, max := range limits {
		write(dir, "memory.max", max+"\n")
	}
	write(self, "memory.events", "oom_kill 0\n")
	return cgroup.Layout{Kind: cgroup.LayoutV2, V2Mount: root, V2Self: filepath.Join(root, self)}
}
