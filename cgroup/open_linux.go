package cgroup

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// setupTimeout bounds clearing a leftover cgroup of the same name.
const setupTimeout = 3 * time.Second

// Options are what Open needs besides the choice and the name.
type Options struct {
	// Reaper is the supervisor's reaper: the processes it started itself
	// (the watcher) are never counted in a proc-mode tree. nil: no reaper
	// (doctor's probes).
	Reaper *proc.Reaper
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
	// Why is the mode taken, where, and in a few words why the modes
	// before it were not: the supervisor's log line. The errors of those
	// modes (a non-root user's ran to 400 characters, in every `jupyter
	// console`, #23) are Detail's alone.
	Why string
	// Detail is Why with each error that ruled a mode out, the paths it
	// names included: what `tfgpu-kernel doctor` prints.
	Detail string
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
// freezer cgroup; ModeProc the proc tree (subreaper and /proc), which
// works everywhere; Auto the first of these that can be set up
// (docs/design.md#containment). The old spelling "none" is read as ModeProc
// (Choice).
func Open(choice, name string, o Options) (Opened, error) {
	choice, _ = Choice(choice)
	switch choice {
	case ModeProc:
		return taken(supervisorProcTree(o.Reaper), "asked for with --cgroup proc"), nil
	case ModeV2:
		return openV2(name, o.v2()...)
	case ModeSystemd:
		return openScope(name, o)
	case ModeV1:
		return openV1(name, o.Reaper)
	case Auto:
	default:
		return Opened{}, fmt.Errorf("--cgroup %q: want auto, v2, systemd, v1 or proc", choice)
	}
	opened, err2 := openV2(name, o.v2()...)
	if err2 == nil {
		return opened, nil
	}
	if opened, err := openScope(name, o); err == nil {
		opened.Why += "; own cgroup not usable"
		opened.Detail = fmt.Sprintf("%s; own cgroup not usable (%v)", opened.Detail, err2)
		return opened, nil
	}
	return Fallback(name, o.Reaper, fmt.Sprintf("no usable cgroup v2 (%v)", err2))
}

// Fallback is the v1 freezer or else the proc tree, with before saying why
// the modes before them were not taken, as "what failed (the error)": what
// Auto ends with, and where a systemd scope failed after the fact. Why
// keeps what failed; Detail the error too.
func Fallback(name string, r *proc.Reaper, before string) (Opened, error) {
	failed, _, _ := strings.Cut(before, " (")
	o, err1 := openV1(name, r)
	if err1 == nil {
		o.Why += "; " + failed
		o.Detail += "; " + before
		return o, nil
	}
	o = taken(supervisorProcTree(r), fmt.Sprintf("%s or v1 freezer (%v); tracking by process group and /proc", before, err1))
	o.Why = failed // mode=proc says v1 was no better
	return o, nil
}

// taken is t, taken for why, nothing left out.
func taken(t Tree, why string) Opened { return Opened{Tree: t, Why: why, Detail: why} }

func supervisorProcTree(r *proc.Reaper) Tree {
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
	return taken(t, fmt.Sprintf("systemd user scope %s, made by %s", t.unit, run)), nil
}

// openV1 is a freezer cgroup under the supervisor's own, with the proc
// sweep behind it (v1 cannot clone into a cgroup).
func openV1(name string, r *proc.Reaper) (Opened, error) {
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
	return taken(t, fmt.Sprintf("v1 freezer (%s host) at %s", l.Kind, t.Dir())), nil
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
	o := taken(t, fmt.Sprintf("cgroup2 (%s host) at %s", l.Kind, t.Dir()))
	o.Leftovers = t.Leftovers()
	return o, nil
}
