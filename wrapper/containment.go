package wrapper

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
)

// Containment modes accepted by --cgroup (DESIGN §5). v1 (freezer) and the
// systemd delegated scope are not built yet.
const (
	CgroupAuto = "auto"
	CgroupV2   = "v2"
	CgroupNone = "none"
)

// setupTimeout bounds clearing a leftover cgroup of the same kernel.
const setupTimeout = 3 * time.Second

// newTree picks the containment for the kernel and says why: mode "v2" is
// a child cgroup of the supervisor's own in the cgroup2 tree (pure or
// hybrid hosts); "none" is the proc tree (subreaper and /proc scan), which
// works everywhere; "auto" takes v2 when the supervisor can create a cgroup
// there, else none.
func newTree(mode, id string, r *cgroup.Reaper, opts ...cgroup.V2Option) (cgroup.Tree, string, error) {
	proc := func() cgroup.Tree { return cgroup.NewProcTree(os.Getpid(), cgroup.WithExclude(r.Owns)) }
	switch mode {
	case CgroupNone:
		return proc(), "asked for with --cgroup none", nil
	case CgroupAuto, CgroupV2:
	default:
		return nil, "", fmt.Errorf("--cgroup %q: want auto, v2 or none", mode)
	}
	tree, why, err := v2Tree(id, opts...)
	if err == nil {
		return tree, why, nil
	}
	if mode == CgroupV2 {
		return nil, "", err
	}
	return proc(), fmt.Sprintf("no usable cgroup v2 (%v); tracking by process group and /proc", err), nil
}

func v2Tree(id string, opts ...cgroup.V2Option) (cgroup.Tree, string, error) {
	l, err := cgroup.DetectLayout()
	if err != nil {
		return nil, "", fmt.Errorf("detect cgroups: %w", err)
	}
	if l.Kind != cgroup.LayoutV2 && l.Kind != cgroup.LayoutHybrid {
		return nil, "", fmt.Errorf("cgroup layout is %s", l.Kind)
	}
	if l.V2Self == "" {
		return nil, "", fmt.Errorf("the supervisor's own cgroup is not visible under %s", l.V2Mount)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	t, err := cgroup.NewV2Tree(ctx, l.V2Self, id, opts...)
	if err != nil {
		return nil, "", err
	}
	return t, fmt.Sprintf("cgroup2 (%s host) at %s", l.Kind, t.Dir()), nil
}
