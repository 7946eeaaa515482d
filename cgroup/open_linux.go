package cgroup

import (
	"context"
	"fmt"
	"os"
	"time"
)

// setupTimeout bounds clearing a leftover cgroup of the same name.
const setupTimeout = 3 * time.Second

// Options are what Open needs besides the choice and the name.
type Options struct {
	// Reaper is the supervisor's reaper: the processes it started itself
	// (the watcher) are never counted in a proc-mode tree. nil: no reaper
	// (doctor's probes).
	Reaper *Reaper
	// MemoryLimit is MemoryMax of a systemd scope (the other modes take
	// their limit from NewMemoryLimit); 0: none.
	MemoryLimit int64
	// V2 are passed to NewV2Tree (tests force the cgroup.procs fallback).
	V2 []V2Option
}

// v2 are the options of a v2 tree: the caller's, and a sweep for the
// processes that leave the cgroup (WithSweep) where there is a reaper to
// keep the supervisor's own children out of it.
func (o Options) v2() []V2Option {
	if o.Reaper == nil {
		return o.V2
	}
	return append([]V2Option{WithSweep(WithExclude(o.Reaper.Owns))}, o.V2...)
}

// Opened is the containment Open chose.
type Opened struct {
	Tree Tree
	// Why says why this mode was taken, and why those before it were not.
	Why string
	// Leftovers is how many processes of an earlier cgroup of the same
	// name (a SIGKILLed supervisor's) were killed to set the tree up.
	Leftovers int
}

// Open sets up the containment for a kernel whose cgroups are named
// tfgpu-NAME (the supervisor passes its kernel id and its own pid, so that
// no two supervisors ever share one). choice is one of Choices: ModeV2 is
// a child cgroup of the supervisor's own in the cgroup2 tree (pure or
// hybrid hosts); ModeSystemd a delegated scope of the user's systemd
// manager, for a supervisor whose own cgroup is not writable; ModeV1 a
// freezer cgroup; None the proc tree (subreaper and /proc), which works
// everywhere; Auto the first of these that can be set up
// (docs/design.md#containment).
func Open(choice, name string, o Options) (Opened, error) {
	switch choice {
	case None:
		return Opened{Tree: supervisorProcTree(o.Reaper), Why: "asked for with --cgroup none"}, nil
	case ModeV2:
		return openV2(name, o.v2()...)
	case ModeSystemd:
		return openScope(name, o)
	case ModeV1:
		return openV1(name, o.Reaper)
	case Auto:
	default:
		return Opened{}, fmt.Errorf("--cgroup %q: want auto, v2, systemd, v1 or none", choice)
	}
	opened, err2 := openV2(name, o.v2()...)
	if err2 == nil {
		return opened, nil
	}
	if opened, err := openScope(name, o); err == nil {
		opened.Why = fmt.Sprintf("%s; own cgroup not usable (%v)", opened.Why, err2)
		return opened, nil
	}
	return Fallback(name, o.Reaper, fmt.Sprintf("no usable cgroup v2 (%v)", err2))
}

// Fallback is the v1 freezer or else the proc tree, with before saying why
// the modes before them were not taken: what Auto ends with, and where a
// systemd scope failed after the fact.
func Fallback(name string, r *Reaper, before string) (Opened, error) {
	opened, err1 := openV1(name, r)
	if err1 == nil {
		opened.Why = fmt.Sprintf("%s; %s", opened.Why, before)
		return opened, nil
	}
	return Opened{Tree: supervisorProcTree(r),
		Why: fmt.Sprintf("%s or v1 freezer (%v); tracking by process group and /proc", before, err1)}, nil
}

func supervisorProcTree(r *Reaper) Tree {
	var opts []ProcOption
	if r != nil {
		opts = append(opts, WithExclude(r.Owns))
	}
	return NewProcTree(os.Getpid(), opts...)
}

func openScope(name string, o Options) (Opened, error) {
	run, l, err := systemdScope()
	if err != nil {
		return Opened{}, err
	}
	t := newScopeTree(run, l, name, o.Reaper, o.MemoryLimit)
	return Opened{Tree: t, Why: fmt.Sprintf("systemd user scope %s, made by %s", t.unit, run)}, nil
}

// openV1 is a freezer cgroup under the supervisor's own, with the proc
// sweep behind it (v1 cannot clone into a cgroup).
func openV1(name string, r *Reaper) (Opened, error) {
	l, err := DetectLayout()
	if err != nil {
		return Opened{}, fmt.Errorf("detect cgroups: %w", err)
	}
	freezer, err := V1SelfDir(l, "freezer")
	if err != nil {
		return Opened{}, err
	}
	pids, _ := V1SelfDir(l, "pids") // optional: counting only
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var sweep []ProcOption
	if r != nil {
		sweep = append(sweep, WithExclude(r.Owns))
	}
	t, err := NewV1Tree(ctx, freezer, pids, name, sweep...)
	if err != nil {
		return Opened{}, err
	}
	return Opened{Tree: t, Why: fmt.Sprintf("v1 freezer (%s host) at %s", l.Kind, t.Dir())}, nil
}

func openV2(name string, opts ...V2Option) (Opened, error) {
	l, err := DetectLayout()
	if err != nil {
		return Opened{}, fmt.Errorf("detect cgroups: %w", err)
	}
	if l.Kind != LayoutV2 && l.Kind != LayoutHybrid {
		return Opened{}, fmt.Errorf("cgroup layout is %s", l.Kind)
	}
	if l.V2Self == "" {
		return Opened{}, fmt.Errorf("the supervisor's own cgroup is not visible under %s", l.V2Mount)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	t, err := NewV2Tree(ctx, l.V2Self, name, opts...)
	if err != nil {
		return Opened{}, err
	}
	return Opened{Tree: t, Why: fmt.Sprintf("cgroup2 (%s host) at %s", l.Kind, t.Dir()), Leftovers: t.Leftovers()}, nil
}
