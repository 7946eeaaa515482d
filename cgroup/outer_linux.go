package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// OuterMemory is the memory limit of the cgroups the supervisor was
// started in (a container's, a Slurm job's, a systemd unit's MemoryMax):
// the kernel lives under it whatever its own limit, and when it is the
// one that kills, the user is told so (#24). The limit is the smallest
// over the supervisor's own memory cgroup and its ancestors visible under
// the mount; the OOM kills are counted where the kernel's processes are
// charged: memory.events oom_kill of the supervisor's own v2 cgroup
// (hierarchical: the kernel's cgroup below it counts too), or
// memory.oom_control oom_kill of its own v1 memory cgroup (v1 counts in
// the victim's own cgroup only, which is the supervisor's as long as the
// kernel has no memory cgroup of its own).
type OuterMemory struct {
	Limit int64  // bytes; 0: no limit found
	Dir   string // the cgroup that sets it
	// counter is the file and key of the OOM kill count; base its value
	// when Baseline was last called.
	counter, key string
	base         int
}

// Of is the limit and the cgroup that sets it, 0 and "" for a nil o (no
// memory controller to read), as engine.ContainerLimit and SlurmLimit take
// them.
func (o *OuterMemory) Of() (limit int64, dir string) {
	if o == nil {
		return 0, ""
	}
	return o.Limit, o.Dir
}

// v1NoLimit: memory.limit_in_bytes of an unlimited v1 cgroup is
// PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB pages); anything
// this large is no limit.
const v1NoLimit = int64(1) << 62

// NewOuterMemory finds the enclosing limit in l; nil when there is no
// memory controller to read (the caller names no outer limit then).
func NewOuterMemory(l Layout) *OuterMemory {
	if l.V2Self != "" {
		if _, err := os.Stat(filepath.Join(l.V2Self, "memory.events")); err == nil {
			o := &OuterMemory{counter: filepath.Join(l.V2Self, "memory.events"), key: "oom_kill"}
			o.Limit, o.Dir = smallestLimit(l.V2Self, l.V2Mount, "memory.max")
			o.Baseline()
			return o
		}
	}
	if self, err := V1SelfDir(l, "memory"); err == nil {
		o := &OuterMemory{counter: filepath.Join(self, "memory.oom_control"), key: "oom_kill"}
		o.Limit, o.Dir = smallestLimit(self, l.V1["memory"], "memory.limit_in_bytes")
		o.Baseline()
		return o
	}
	return nil
}

// smallestLimit walks from dir up to mount (both included), reading file
// in each: "max" or a v1 unlimited value is none.
func smallestLimit(dir, mount, file string) (limit int64, where string) {
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
			s := strings.TrimSpace(string(b))
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < v1NoLimit && (limit == 0 || n < limit) {
				limit, where = n, d
			}
		}
		if d == mount || d == "/" || !strings.HasPrefix(d, mount) {
			return limit, where
		}
	}
}

// Baseline remembers the OOM kill count now: Hit reports kills after it.
func (o *OuterMemory) Baseline() {
	if o != nil {
		o.base, _ = readKey(o.counter, o.key)
	}
}

// Hit reports whether the OOM killer killed in the supervisor's cgroup
// since Baseline, under a limit (with no limit it was the host's own OOM
// killer, which is not the engine's limit).
func (o *OuterMemory) Hit() bool {
	if o == nil || o.Limit == 0 {
		return false
	}
	n, err := readKey(o.counter, o.key)
	return err == nil && n > o.base
}
