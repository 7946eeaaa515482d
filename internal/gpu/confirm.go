package gpu

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// Source lists NVML's process entries; *NVML is one.
type Source interface {
	Holders() ([]Holder, error)
}

// Attribution modes, as Result.By and the log say them.
const (
	ByPID      = "pid"      // NVML's pids are this /proc's: an entry is the tree's if its pid was
	ByBaseline = "baseline" // they are not (a PID namespace): what appeared since the baseline
)

// Old is what is known of a kernel's tree when it is killed, enough to tell
// its NVML entries from everyone else's afterwards.
type Old struct {
	// PIDs are the tree's processes just before the kill.
	PIDs []int `json:"pids"`
	// Starts are their start times (/proc stat field 22), so that a pid
	// still alive after the kill can be told apart: the same process not
	// dead yet (still the tree's) or a new one that reused the number.
	Starts map[int]uint64 `json:"starts,omitempty"`
	// Baseline is NVML's list before the kernel was spawned.
	Baseline []Holder `json:"baseline"`
	// By is ByPID or ByBaseline (see Mode).
	By string `json:"by"`
	// Held is what the tree held just before the kill: the figures of
	// the "released" log line.
	Held []Holder `json:"held"`
}

// Mode says how entries can be attributed: ByBaseline when NVML's pids
// are not this PID namespace's, ByPID otherwise. That is so when the
// supervisor is in a PID namespace other than the host's (a container,
// a pod: see nestedPIDNamespace), or when NVML lists a pid no process here
// can have (at least /proc/sys/kernel/pid_max). A listed pid that merely
// does not exist is no evidence: the driver lists a dead process until it
// has torn its context down, for seconds, or for ever when it cannot.
func Mode(lists ...[]Holder) string {
	if nestedPIDNamespace() {
		return ByBaseline
	}
	max := pidMax()
	for _, l := range lists {
		for _, h := range l {
			if h.PID >= max {
				return ByBaseline
			}
		}
	}
	return ByPID
}

// pidMax is /proc/sys/kernel/pid_max: pids here are below it.
func pidMax() int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 1 << 22 // the kernel's upper bound on 64-bit
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 1 << 22
	}
	return n
}

// Ours returns the entries of hs that are the old tree's. By pid: the pid
// was in the tree and is no live process now, or is still the same process
// (killed, not dead yet); a live process that reused the number is someone
// else's. By baseline: the entry was
// not there before the kernel spawned, and its pid is not a live process
// outside the tree. Another user's or notebook's process is never counted.
func (o *Old) Ours(hs []Holder) []Holder {
	var out []Holder
	for _, h := range hs {
		inTree := slices.Contains(o.PIDs, h.PID)
		switch o.By {
		case ByBaseline:
			if !slices.ContainsFunc(o.Baseline, func(b Holder) bool { return b.Device == h.Device && b.PID == h.PID }) &&
				!(Alive(h.PID) && !inTree) {
				out = append(out, h)
			}
		default:
			if inTree && (!Alive(h.PID) || o.sameProcess(h.PID)) {
				out = append(out, h)
			}
		}
	}
	return out
}

// Watch records what a live tree of processes pids holds, from NVML's list
// hs taken just before the tree is killed; baseline is NVML's list from
// before the tree began (nil when unknown).
func Watch(hs []Holder, pids []int, baseline []Holder) *Old {
	old := &Old{PIDs: pids, Baseline: baseline, By: Mode(baseline, hs), Starts: map[int]uint64{}}
	for _, p := range pids {
		if st := startTime(p); st != 0 {
			old.Starts[p] = st
		}
	}
	if old.By == ByPID {
		old.Held = Holding(hs, pids)
	} else {
		old.Held = old.Ours(hs)
	}
	return old
}

// sameProcess reports whether pid is still the process Watch recorded.
func (o *Old) sameProcess(pid int) bool {
	want, ok := o.Starts[pid]
	return ok && want != 0 && startTime(pid) == want
}

// Holding returns the entries of hs whose pid is one of pids: a live
// tree's GPU use.
func Holding(hs []Holder, pids []int) []Holder {
	var out []Holder
	for _, h := range hs {
		if slices.Contains(pids, h.PID) {
			out = append(out, h)
		}
	}
	return out
}

// Result is the outcome of Confirm.
type Result struct {
	By   string
	Took time.Duration
	// Released are the bytes per device the tree held before the kill
	// (Old.Held), -1 where NVML gave no figure.
	Released map[int]int64
	// Held is what is still the tree's when Confirm gave up; empty when
	// everything was released.
	Held []Holder
	// Polls is how many times NVML was asked.
	Polls int
}

// Confirm asks src every poll until none of its entries is the old tree's
// (then Held is empty), or until ctx ends (then Held is what is left). An
// NVML error ends it at once.
func Confirm(ctx context.Context, src Source, old Old, poll time.Duration) (Result, error) {
	start := time.Now()
	res := Result{By: old.By, Released: Sum(old.Held)}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		hs, err := src.Holders()
		res.Polls++
		if err != nil {
			res.Took = time.Since(start)
			return res, err
		}
		res.Held = old.Ours(hs)
		if len(res.Held) == 0 {
			res.Took = time.Since(start)
			return res, nil
		}
		t.Reset(poll)
		select {
		case <-ctx.Done():
			res.Took = time.Since(start)
			return res, nil
		case <-t.C:
		}
	}
}

// Sum adds up bytes per device; a device with an entry whose figure NVML
// cannot give sums to -1.
func Sum(hs []Holder) map[int]int64 {
	out := map[int]int64{}
	for _, h := range hs {
		switch cur, ok := out[h.Device]; {
		case h.Bytes < 0 || (ok && cur < 0):
			out[h.Device] = -1
		default:
			out[h.Device] = cur + h.Bytes
		}
	}
	return out
}

// HeldText says who still holds what, for the user: one Describe per
// entry.
func (r Result) HeldText() string {
	held := make([]string, len(r.Held))
	for i, h := range r.Held {
		held[i] = Describe(h)
	}
	return strings.Join(held, "; ")
}

// FormatBytes writes n bytes as bytesize.Format does ("512 MiB",
// "2.5 GiB"); "? MiB" when NVML gave no figure.
func FormatBytes(n int64) string {
	if n < 0 {
		return "? MiB"
	}
	return bytesize.Format(n)
}

// ReleasedText formats Result.Released for the log: "GPU0 2 GiB, GPU1 512 MiB".
func (r Result) ReleasedText() string {
	if len(r.Released) == 0 {
		return "none held"
	}
	devs := make([]int, 0, len(r.Released))
	for d := range r.Released {
		devs = append(devs, d)
	}
	slices.Sort(devs)
	parts := make([]string, len(devs))
	for i, d := range devs {
		parts[i] = fmt.Sprintf("GPU%d %s", d, FormatBytes(r.Released[d]))
	}
	return strings.Join(parts, ", ")
}

// Describe says who holds h, for the user: device, pid, command and owner
// where this /proc shows them, and MiB (as nvidia-smi shows it).
func Describe(h Holder) string {
	who := fmt.Sprintf("pid %d", h.PID)
	if cmd := Command(h.PID); cmd != "" {
		who += " (" + cmd + ")"
	}
	if u := Owner(h.PID); u != "" {
		who += " of " + u
	}
	return fmt.Sprintf("GPU%d: %s holds %s", h.Device, who, FormatBytes(h.Bytes))
}

// Command is pid's command line, shortened, or "" when it is not visible.
func Command(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return ""
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// Owner is the user name (or uid) of pid, or "" when it is not visible.
func Owner(pid int) string {
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return ""
	}
	uid := fileUID(fi)
	if uid < 0 {
		return ""
	}
	return userName(uid)
}

// startTime is pid's start time (proc.StartTime), 0 when there is no
// such process.
func startTime(pid int) uint64 {
	st, err := proc.StartTime(pid)
	if err != nil {
		return 0
	}
	return st
}

// Alive reports whether pid is a live process (not a zombie) here.
func Alive(pid int) bool {
	p, err := proc.Read(pid)
	return err == nil && p.Alive()
}

// nestedPIDNamespace reports whether this process is in a PID namespace
// other than the host's, whose pids NVML gives. A container's own /proc
// shows NSpid only from its own level down, so the namespace is told by its
// inode: the initial PID namespace's is fixed (PROC_PID_INIT_INO in the
// kernel's include/linux/proc_ns.h). NSpid with more than one pid (a /proc
// of the host's, seen from inside) says so too.
func nestedPIDNamespace() bool {
	if ns, err := os.Readlink("/proc/self/ns/pid"); err == nil && ns != initPIDNamespace {
		return true
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			return len(strings.Fields(v)) > 1
		}
	}
	return false
}

// initPIDNamespace is /proc/self/ns/pid in the initial PID namespace.
const initPIDNamespace = "pid:[4026531836]"

func fileUID(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(uid)
}
