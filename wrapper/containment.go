package wrapper

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
)

// Containment modes accepted by --cgroup (DESIGN §5).
const (
	CgroupAuto    = "auto"
	CgroupV2      = "v2"
	CgroupSystemd = "systemd"
	CgroupV1      = "v1"
	CgroupNone    = "none"
)

// cgroupName is the name of this supervisor's cgroups for kernel id (the
// tree's, tfgpu-NAME, and a v1 memory cgroup's): the kernel id and the
// supervisor's pid, so that the next supervisor of the same kernel, which
// jupyter_client starts at once on restart_kernel(now=True), never shares a
// cgroup with the dead one's watcher (watch.go) or leftovers.
func cgroupName(id string) string { return id + "-" + strconv.Itoa(os.Getpid()) }

// setupTimeout bounds clearing a leftover cgroup of the same kernel.
const setupTimeout = 3 * time.Second

// newTree picks the containment for the kernel and says why: mode "v2" is
// a child cgroup of the supervisor's own in the cgroup2 tree (pure or
// hybrid hosts); "systemd" a delegated scope of the user's systemd manager,
// for a supervisor whose own cgroup is not writable; "v1" a freezer cgroup;
// "none" the proc tree (subreaper and /proc scan), which works everywhere;
// "auto" takes the first of v2, systemd, v1 and none that can be set up.
func newTree(mode, id string, r *cgroup.Reaper, opts ...cgroup.V2Option) (cgroup.Tree, string, error) {
	switch mode {
	case CgroupNone:
		return procTree(r), "asked for with --cgroup none", nil
	case CgroupV2:
		return v2Tree(cgroupName(id), opts...)
	case CgroupSystemd:
		return scopeMode(id, r)
	case CgroupV1:
		return v1Tree(cgroupName(id), r)
	case CgroupAuto:
	default:
		return nil, "", fmt.Errorf("--cgroup %q: want auto, v2, systemd, v1 or none", mode)
	}
	tree, why, err2 := v2Tree(cgroupName(id), opts...)
	if err2 == nil {
		return tree, why, nil
	}
	if tree, why, err := scopeMode(id, r); err == nil {
		return tree, fmt.Sprintf("%s; own cgroup not usable (%v)", why, err2), nil
	}
	return lastResort(id, r, fmt.Sprintf("no usable cgroup v2 (%v)", err2))
}

// lastResort is the v1 freezer or else the proc tree, with why the modes
// before them were not taken.
func lastResort(id string, r *cgroup.Reaper, before string) (cgroup.Tree, string, error) {
	tree, why, err1 := v1Tree(cgroupName(id), r)
	if err1 == nil {
		return tree, fmt.Sprintf("%s; %s", why, before), nil
	}
	return procTree(r), fmt.Sprintf("%s or v1 freezer (%v); tracking by process group and /proc", before, err1), nil
}

func procTree(r *cgroup.Reaper) cgroup.Tree {
	var opts []cgroup.ProcOption
	if r != nil {
		opts = append(opts, cgroup.WithExclude(r.Owns))
	}
	return cgroup.NewProcTree(os.Getpid(), opts...)
}

func scopeMode(id string, r *cgroup.Reaper) (cgroup.Tree, string, error) {
	run, l, err := systemdScope()
	if err != nil {
		return nil, "", err
	}
	t := newScopeTree(run, l, id, r)
	return t, fmt.Sprintf("systemd user scope %s, made by %s", t.unit, run), nil
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
		if s.mem, how, err = cgroup.NewMemoryLimit(l, cgroupName(s.id), limit); err == nil {
			s.log.Info("memory limit", "limit", cgroup.FormatSize(s.mem.Limit()), "how", how)
			return
		}
	}
	s.log.Warn("memory limit not applied; the kernel runs without one", "limit", cgroup.FormatSize(limit), "why", err)
}
