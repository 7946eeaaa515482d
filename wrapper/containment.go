package wrapper

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
)

// Containment modes accepted by --cgroup (DESIGN §5). The systemd
// delegated scope is not built yet.
const (
	CgroupAuto = "auto"
	CgroupV2   = "v2"
	CgroupV1   = "v1"
	CgroupNone = "none"
)

// setupTimeout bounds clearing a leftover cgroup of the same kernel.
const setupTimeout = 3 * time.Second

// newTree picks the containment for the kernel and says why: mode "v2" is
// a child cgroup of the supervisor's own in the cgroup2 tree (pure or
// hybrid hosts); "v1" a freezer cgroup; "none" the proc tree (subreaper and
// /proc scan), which works everywhere; "auto" takes the first of v2, v1 and
// none that the supervisor can set up.
func newTree(mode, id string, r *cgroup.Reaper, opts ...cgroup.V2Option) (cgroup.Tree, string, error) {
	proc := func() cgroup.Tree { return cgroup.NewProcTree(os.Getpid(), cgroup.WithExclude(r.Owns)) }
	switch mode {
	case CgroupNone:
		return proc(), "asked for with --cgroup none", nil
	case CgroupV2:
		return v2Tree(id, opts...)
	case CgroupV1:
		return v1Tree(id, r)
	case CgroupAuto:
	default:
		return nil, "", fmt.Errorf("--cgroup %q: want auto, v2, v1 or none", mode)
	}
	tree, why, err2 := v2Tree(id, opts...)
	if err2 == nil {
		return tree, why, nil
	}
	tree, why, err1 := v1Tree(id, r)
	if err1 == nil {
		return tree, fmt.Sprintf("%s; no usable cgroup v2 (%v)", why, err2), nil
	}
	return proc(), fmt.Sprintf("no usable cgroup v2 (%v) or v1 freezer (%v); tracking by process group and /proc", err2, err1), nil
}

// v1Tree is a freezer cgroup under the supervisor's own, with the proc
// sweep behind it (v1 cannot clone into a cgroup).
func v1Tree(id string, r *cgroup.Reaper) (cgroup.Tree, string, error) {
	l, err := cgroup.DetectLayout()
	if err != nil {
		return nil, "", fmt.Errorf("detect cgroups: %w", err)
	}
	freezer, err := cgroup.V1SelfDir(l, "freezer")
	if err != nil {
		return nil, "", err
	}
	pids, _ := cgroup.V1SelfDir(l, "pids") // optional: counting only
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var sweep []cgroup.ProcOption
	if r != nil {
		sweep = append(sweep, cgroup.WithExclude(r.Owns))
	}
	t, err := cgroup.NewV1Tree(ctx, freezer, pids, id, sweep...)
	if err != nil {
		return nil, "", err
	}
	return t, fmt.Sprintf("v1 freezer (%s host) at %s", l.Kind, t.Dir()), nil
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

// limitMemory applies the memory limit to the kernel's tree-to-be, or says
// once why it cannot (the kernel then runs without one).
func (s *supervisor) limitMemory(limit int64) {
	l, err := cgroup.DetectLayout()
	if err == nil {
		var how string
		if s.mem, how, err = cgroup.NewMemoryLimit(l, s.id, limit); err == nil {
			s.log.Info("memory limit", "limit", cgroup.FormatSize(s.mem.Limit()), "how", how)
			return
		}
	}
	s.log.Warn("memory limit not applied; the kernel runs without one", "limit", cgroup.FormatSize(limit), "why", err)
}
