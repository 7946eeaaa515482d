package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// Finishing a recorded kernel is one sequence wherever it happens (the
// next supervisor's sweep of dead supervisors' kernels, the watcher of a
// SIGKILLed supervisor, `tfgpu-kernel stop`): watch what the tree holds on
// the GPU → kill the tree and remove what it leaves (Finish) → confirm
// through NVML that the memory is back (docs/design.md#kernel-records).

// FinishOptions are what FinishKernel needs besides the record.
type FinishOptions struct {
	GPU      gpu.Session  // gpu.Off: the release is not checked
	Baseline []gpu.Holder // NVML's list before the kernel started (attribution in a PID namespace)
	// AlsoPids are watched besides the tree's live processes: the kernel
	// of a SIGKILLed supervisor, dead of its parent-death signal, whose
	// context may still be torn down.
	AlsoPids       []int
	KillTimeout    time.Duration
	ConfirmTimeout time.Duration
	// BeforeKill runs once the tree is watched, before it is killed:
	// `stop` asks a live supervisor to stop its kernel itself there.
	BeforeKill func()
	// ForGood says the kernel ends for good (`stop`), not for a next
	// supervisor of it: its live standby and spare are stopped with it,
	// and the record that it keeps no spare goes too (finishSpare).
	ForGood bool
}

// Finished is what FinishKernel did.
type Finished struct {
	Killed int           // processes killed
	Took   time.Duration // from the start to the tree being gone
	// GPU is the outcome of the release check; nil when it was not done
	// (no NVML, or NVML could not list the processes: GPUErr says why).
	GPU    *gpu.Result
	GPUErr error
}

// FinishKernel finishes the kernel st records: see above. An error is the
// kill's (wrapping ErrRefused when a field did not check out); the GPU
// check's outcome is in Finished.
func (d *Dir) FinishKernel(st State, o FinishOptions) (Finished, error) {
	start := time.Now()
	var old *gpu.Old
	var f Finished
	if hs, err := o.GPU.Holders(); err == nil {
		old = gpu.Watch(hs, append(st.TreePids(), o.AlsoPids...), o.Baseline)
	} else {
		f.GPUErr = err
	}
	if o.BeforeKill != nil {
		o.BeforeKill()
	}
	killed, err := d.finish(st, o.KillTimeout, o.ForGood)
	f.Killed, f.Took = killed, time.Since(start)
	if err != nil || old == nil {
		return f, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.ConfirmTimeout)
	defer cancel()
	res, err := gpu.Confirm(ctx, o.GPU, *old, gpu.ConfirmPoll)
	f.GPU, f.GPUErr = &res, err
	return f, nil
}

// Finish kills the tree of the kernel st describes, waits until it is
// empty and removes its cgroups, inner directory and records: its state
// file and activity, and its spare's record and standby socket once the
// processes these name are gone (finishSpare). Every field is checked
// first (check.go); a field that does not check out is not acted on, and
// the error (wrapping ErrRefused) says which. It returns how many
// processes were killed.
func (d *Dir) Finish(st State, timeout time.Duration) (int, error) {
	return d.finish(st, timeout, false)
}

func (d *Dir) finish(st State, timeout time.Duration, forGood bool) (int, error) {
	if !ValidKernelID(st.KernelID) {
		return 0, refused("kernel id %q", Printable(st.KernelID))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	killed := 0
	var errs []error
	if st.thisBoot() {
		n, err := st.killTree(ctx)
		killed = n
		errs = append(errs, err)
		if st.MemoryCgroup != "" {
			mem := st
			mem.Cgroup = st.MemoryCgroup
			if mc, err := mem.checkedCgroup(); err != nil {
				errs = append(errs, err)
			} else if mc != "" {
				_ = os.Remove(mc) // empty once the tree is dead
			}
		}
	}
	// The dead supervisor's inner directory (its sockets).
	if in, err := st.checkedInnerDir(); err != nil {
		errs = append(errs, err)
	} else if in != "" {
		_ = os.RemoveAll(in)
	}
	err := errors.Join(errs...)
	if err == nil || errors.Is(err, ErrRefused) {
		// A record that is a lie is not kept either; one that the next
		// supervisor of this kernel has written since is left alone.
		if b, rerr := d.read(stateName(st.KernelID)); rerr == nil {
			var now State
			if json.Unmarshal(b, &now) == nil && now.SupervisorPID == st.SupervisorPID && now.SupervisorStart == st.SupervisorStart {
				_ = d.remove(stateName(st.KernelID))
				d.removeActivity(st.KernelID, st.SupervisorPID)
				// A live standby is stopped only for a record that checked
				// out and is still this generation's: never one that a
				// newer supervisor of the kernel keeps.
				killed += d.finishSpare(ctx, st.KernelID, forGood && err == nil)
				return killed, err
			}
		}
		d.finishSpare(ctx, st.KernelID, false) // only what dead processes left
	}
	return killed, err
}

// killTree kills what the record's containment names: its cgroup, or in
// the proc mode the kernel's process group and what the supervisor last
// saw of its tree; and, once the supervisor is gone, what carries the
// tree's marker.
func (st State) killTree(ctx context.Context) (int, error) {
	killed := 0
	var errs []error
	cg, err := st.checkedCgroup()
	errs = append(errs, err)
	switch {
	case err != nil:
	case cg != "" && (st.Containment == cgroup.ModeV2 || st.Containment == cgroup.ModeSystemd):
		killed, err = cgroup.DestroyV2(ctx, cg)
		errs = append(errs, err)
	case cg != "" && st.Containment == cgroup.ModeV1:
		killed, err = cgroup.DestroyV1(ctx, cg)
		errs = append(errs, err)
	case cg == "" && st.Cgroup == "" && st.KernelPID > 1 && !st.owns(st.KernelPID, st.KernelStart) &&
		st.started(st.KernelPID, st.KernelStart):
		errs = append(errs, refused("kernel pid %d belongs to uid %d, not to the record's owner %d",
			st.KernelPID, proc.Owner(st.KernelPID), st.Owner))
	case cg == "" && st.Cgroup == "" && st.owns(st.KernelPID, st.KernelStart):
		// proc mode: without a cgroup only the kernel's process group
		// can be found once its supervisor (the subreaper) is gone, and
		// only while the kernel, its leader, lives: a pid reused since
		// could lead another group.
		if e := unix.Kill(-st.KernelPID, unix.SIGKILL); e == nil {
			killed = 1
		} else if !errors.Is(e, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("kill process group %d: %w", st.KernelPID, e))
		}
	}
	if st.Cgroup == "" && !st.SupervisorAlive() && st.thisBoot() && st.KernelStart > 0 {
		// What the supervisor last saw of its tree, their descendants and
		// the kernel's process group, from /proc/PID/stat: a process that
		// left the group and hides its environment (non-dumpable) is found
		// so, its marker unreadable (docs/security.md#threats, class 5).
		n, err := proc.KillRelated(ctx, st.Tree, st.KernelPID, st.Owner, st.KernelStart)
		killed = max(killed, n) // the group killed above is found again until it is reaped
		errs = append(errs, err)
	}
	if st.validMarker() && !st.SupervisorAlive() {
		// Also what left the group (setsid), or the cgroup (a delegated
		// one lets a process move itself out), and was reparented away
		// when the supervisor, their subreaper, died.
		n, err := proc.KillMarked(ctx, st.Marker, st.Owner)
		killed = max(killed, n)
		errs = append(errs, err)
	}
	return killed, errors.Join(errs...)
}
