package wrapper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/engine"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// cgroupName is the name of this supervisor's cgroups for kernel id (the
// tree's, tfgpu-NAME, and a v1 memory cgroup's): the kernel id and the
// supervisor's pid, so that the next supervisor of the same kernel, which
// jupyter_client starts at once on restart_kernel(now=True), never shares a
// cgroup with the dead one's watcher (watcher.go) or leftovers.
func cgroupName(id string) string { return id + "-" + strconv.Itoa(os.Getpid()) }

// startTime reads a process's start time; a test makes it fail.
var startTime = proc.StartTime

// sweep finishes the kernels whose supervisor died (SIGKILL, OOM, a crash)
// and whose watcher did not, before this one starts: their processes may
// hold memory, GPU contexts included. It returns the warning for the
// user's first cell when a dead predecessor of this kernel left GPU memory
// held.
func (s *supervisor) sweep() (warning string) {
	states, refusals, err := s.dir.States()
	if err != nil {
		s.log.Warn("cannot read kernel states", "dir", s.dir.Path(), "err", err)
	}
	for _, r := range refusals {
		s.log.Warn("refused a kernel record", "why", r)
	}
	if n := s.dir.SweepSpares(s.id); n > 0 {
		s.log.Debug("removed what killed standbys left", "files", n)
	}
	if n := s.dir.SweepIdentities(s.id, time.Now()); n > 0 {
		s.log.Debug("removed routing identities no supervisor will take", "files", n)
	}
	for _, st := range states {
		if st.SupervisorAlive() {
			continue
		}
		f, err := s.dir.FinishKernel(st, record.FinishOptions{GPU: s.gpu.sess,
			KillTimeout: s.cfg.KillTimeout, ConfirmTimeout: s.cfg.ConfirmTimeout})
		attrs := []any{"dead_kernel", st.KernelID, "dead_supervisor", st.SupervisorPID, "processes", f.Killed}
		switch {
		case errors.Is(err, record.ErrRefused):
			s.log.Warn("refused to act on a kernel record", append(attrs, "file", st.File(), "why", err)...)
			continue
		case err != nil:
			s.log.Error("cannot finish a kernel whose supervisor died", append(attrs, "err", err)...)
			continue
		case st.KernelID == s.id:
			s.log.Warn("killed processes left by a previous supervisor of this kernel", attrs...)
		default:
			s.log.Warn("finished a kernel whose supervisor died", attrs...)
		}
		if f.GPU == nil {
			continue // not checked
		}
		if w, _ := s.gpu.report("previous supervisor died", *f.GPU, f.GPUErr); w != "" && st.KernelID == s.id {
			warning = w
		}
	}
	return warning
}

// describe is what the supervisor records about its kernel now. It fails
// when the supervisor cannot read its own start time: a record with a
// wrong one would make the next supervisor take this one for dead and
// "finish" a kernel that is still running.
func (s *supervisor) describe() (record.State, error) {
	start, err := startTime(os.Getpid())
	if err != nil {
		return record.State{}, fmt.Errorf("read the supervisor's start time: %w", err)
	}
	st := record.State{KernelID: s.id, SupervisorPID: os.Getpid(), SupervisorStart: start,
		Containment: s.tree.Mode(), Cgroup: s.tree.Dir(), ConnectionFile: s.cfg.ConnFile, InnerDir: s.innerDir,
		Session: os.Getenv("JPY_SESSION_NAME"), Started: time.Now().UTC(), Phase: s.phase.String(),
		BootID: record.BootID, Owner: os.Geteuid(), Marker: s.marker, MemoryCgroup: s.memoryCgroup(), Parks: true}
	if s.engine.Kind == engine.Slurm {
		st.Slurm = &record.SlurmJob{Job: s.engine.SlurmJob, Step: s.engine.SlurmStep, Cgroups: jobCgroupDirs(s.engine)}
	}
	st.Stub, st.Watcher, st.Placement = s.stubRef, s.watcherRef(), s.placement
	if s.kpid > 0 {
		if kstart, err := startTime(s.kpid); err == nil { // else dead already: nothing to name
			st.KernelPID, st.KernelStart = s.kpid, kstart
		}
	}
	return st, nil
}

// jobCgroupDirs are the directories of the Slurm job's cgroups e names,
// where their hierarchies are mounted here.
func jobCgroupDirs(e engine.Engine) []string {
	l, err := cgroup.DetectLayout()
	if err != nil {
		return nil
	}
	var out []string
	for _, jc := range e.JobCgroups {
		mnt := ""
		if jc.Controllers == "" {
			mnt = l.V2Mount
		}
		for _, c := range strings.Split(jc.Controllers, ",") {
			if m := l.V1[c]; m != "" {
				mnt = m
				break
			}
		}
		if mnt != "" && !slices.Contains(out, filepath.Join(mnt, jc.Path)) {
			out = append(out, filepath.Join(mnt, jc.Path))
		}
	}
	return out
}

// watcherRef names the supervisor's watcher, while it runs.
func (s *supervisor) watcherRef() *proc.Ref {
	if s.watch == nil {
		return nil
	}
	start, err := startTime(s.watch.pid)
	if err != nil {
		return nil
	}
	return &proc.Ref{PID: s.watch.pid, Start: start}
}

// memoryCgroup is the memory limit's cgroup when it is one of its own (v1),
// not the tree's.
func (s *supervisor) memoryCgroup() string {
	if s.mem == nil || s.tree.Dir() == s.mem.Where() {
		return ""
	}
	return s.mem.Where()
}

// publishActivity creates the kernel's activity file: idle since now.
func (s *supervisor) publishActivity() {
	a, err := s.dir.PublishActivity(s.id, time.Now())
	if err != nil {
		s.log.Warn("cannot publish the kernel's execution state; ps shows it as unknown and stop --idle-for leaves it alone", "err", err)
		return
	}
	s.activity = a
	s.onExit(a.Close)
}

// activityChanged is the relay's Activity hook: a cell started (busy) or
// the last one ended.
func (s *supervisor) activityChanged(busy bool) {
	s.activity.Set(busy, time.Now())
	s.limit.noteActivity(busy)
}

// record writes the state file once the kernel runs, and tells the
// watcher. Without it `tfgpu-kernel stop` cannot find the kernel, but the
// kernel runs.
func (s *supervisor) record() {
	st, err := s.describe()
	if err == nil {
		s.watch.send(watchMsg{Record: &st})
		err = s.dir.Write(st)
	}
	if err != nil {
		s.log.Warn("cannot record the kernel's state; 'tfgpu-kernel stop' will not find it", "err", err)
		return
	}
	s.st = st
}

// takeNotice returns what the previous supervisor of this kernel left for
// its first cell (tellCell), and drops the notices of other kernels that
// no supervisor took in time.
func (s *supervisor) takeNotice() string {
	now := time.Now()
	text, err := s.dir.TakeNotice(s.id, now)
	if err != nil {
		s.log.Warn("dropped the previous kernel's notice", "err", err)
	}
	if n := s.dir.DropStaleNotices(now); n > 0 {
		s.log.Debug("dropped notices no kernel took", "notices", n)
	}
	return text
}
