//go:build linux

package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// The property of issue 32 at one state of a kernel (identity_test.go):
// what root's and its owner's ps and doctor must say of it.

// identityWant is what ps must say of a kernel in one state.
type identityWant struct {
	state      string // record.PhaseStarting, PhaseRunning, PhaseParked
	hold       bool   // parked and held
	supervisor int    // its supervisor
	stub       int    // the launched process a standby took over from (0: none)
	kernel     int    // the kernel process (0: none, or not known)
	spare      [2]int // a waiting spare and its standby (0s: not known)
	noSpare    bool   // none may be kept (--no-spare)
}

// psRow is a row of ps --json as these tests read it: a type of their
// own, so that they build against an older tree too (to show that they
// fail there).
type psRow struct {
	KernelID      string      `json:"kernel_id"`
	SupervisorPID int         `json:"supervisor_pid"`
	KernelPID     int         `json:"kernel_pid"`
	PIDs          []int       `json:"pids"`
	State         string      `json:"state"`
	UID           int         `json:"uid"`
	User          string      `json:"user"`
	Escaped       []int       `json:"escaped"`
	Processes     []psProcess `json:"processes"`
	Parked        *struct {
		Hold bool `json:"hold"`
	} `json:"parked"`
	Spare *struct {
		PID        int `json:"pid"`
		StandbyPID int `json:"standby_pid"`
	} `json:"spare"`
}

// psProcess is a process of a kernel, in its role (record.Census).
type psProcess struct {
	PID  int    `json:"pid"`
	Role string `json:"role"`
}

// newKernelID is a kernel id as jupyter_server makes them.
func newKernelID(t *testing.T) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:]
}

// check is the property at one state: root's and the owner's ps and
// doctor (run side by side: the state holds still while they look).
func (o *kernelOwner) check(t *testing.T, step, id string, want identityWant) {
	t.Helper()
	own := func(args ...string) func() commandResult {
		argv := o.argv(append([]string{o.bin}, args...))
		return func() commandResult { return runCommand(o.sys(), o.env, argv[0], argv[1:]...) }
	}
	root := func(args ...string) func() commandResult {
		return func() commandResult {
			return runCommand(&syscall.SysProcAttr{Setpgid: true}, o.rootEnv(), o.bin, args...)
		}
	}
	runs := []func() commandResult{root("ps", "--json"), own("ps", "--json"), root("doctor"), own("doctor"), root("ps"), own("ps")}
	results := make([]commandResult, len(runs))
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = run() }()
	}
	wg.Wait()
	for i, who := range []string{"root", o.name} {
		ps, doctor, table := results[i], results[2+i], results[4+i]
		if ps.err != nil || doctor.err != nil || table.err != nil {
			t.Fatalf("%s: %s's ps or doctor: %v %v %v", step, who, ps.err, doctor.err, table.err)
		}
		rows := parsePS(t, ps)
		row := o.checkPS(t, step+": "+who+"'s ps", rows, ps.stderr, id, want)
		o.checkTable(t, step+": "+who+"'s ps table", table.stdout, id, want)
		o.checkDoctor(t, step+": "+who+"'s doctor", doctor.code, doctor.stdout+doctor.stderr, id, row, i == 0)
	}
}

// ps is root's (asRoot) or the owner's ps --json, and what it said on
// stderr.
func (o *kernelOwner) ps(t *testing.T, asRoot bool) ([]psRow, string) {
	t.Helper()
	var r commandResult
	if asRoot {
		r.code, r.stdout, r.stderr = o.asRoot(t, "ps", "--json")
	} else {
		r.code, r.stdout, r.stderr = o.runSplit(t, "ps", "--json")
	}
	return parsePS(t, r), r.stderr
}

// parsePS reads ps --json's rows.
func parsePS(t *testing.T, r commandResult) []psRow {
	t.Helper()
	var rows []psRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); r.code != 0 || err != nil {
		t.Fatalf("ps --json: exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	return rows
}

// checkPS checks rows against want for the kernel id and returns its row
// (nil when there is not exactly one).
func (o *kernelOwner) checkPS(t *testing.T, what string, rows []psRow, stderr, id string, want identityWant) *psRow {
	t.Helper()
	var row *psRow
	n := 0
	for i := range rows {
		if rows[i].KernelID == id {
			row, n = &rows[i], n+1
		}
	}
	if n != 1 {
		b, _ := json.MarshalIndent(rows, "", "  ")
		t.Errorf("%s lists kernel %s %d times, want once:\n%s%s", what, id, n, b, stderr)
		return nil
	}
	errorf := func(format string, args ...any) {
		t.Helper()
		b, _ := json.MarshalIndent(row, "", "  ")
		t.Errorf(what+": "+format+"\nits row:\n%s", append(args, b)...)
	}
	if row.UID != o.uid || row.User != o.name {
		errorf("user %q (uid %d), want %q (uid %d)", row.User, row.UID, o.name, o.uid)
	}
	held := row.Parked != nil && row.Parked.Hold
	if row.State != want.state || held != want.hold {
		errorf("state %s (held %v), want %s (held %v)", row.State, held, want.state, want.hold)
	}
	if len(row.Escaped) > 0 {
		errorf("escaped %v: nothing of a healthy kernel left its cgroup", row.Escaped)
	}
	roles := map[int]string{}
	for _, m := range row.Processes {
		if _, twice := roles[m.PID]; twice {
			errorf("process %d listed twice", m.PID)
		}
		roles[m.PID] = m.Role
		if uid := proc.Owner(m.PID); alive(m.PID) && uid != o.uid {
			errorf("process %d (%s) is uid %d's", m.PID, m.Role, uid)
		}
	}
	has := func(role string) bool {
		return slices.ContainsFunc(row.Processes, func(m psProcess) bool { return m.Role == role })
	}
	if roles[row.SupervisorPID] != "supervisor" || row.SupervisorPID != want.supervisor {
		errorf("supervisor %d (%q), want %d with role supervisor", row.SupervisorPID, roles[row.SupervisorPID], want.supervisor)
	}
	if want.stub != 0 && roles[want.stub] != "stub" {
		errorf("the launched process %d is %q, want the stub", want.stub, roles[want.stub])
	} else if want.stub == 0 && has("stub") {
		errorf("a stub, and none was launched")
	}
	if want.kernel != 0 && (row.KernelPID != want.kernel || roles[want.kernel] != "kernel") {
		errorf("kernel %d (%q), want %d with role kernel", row.KernelPID, roles[want.kernel], want.kernel)
	}
	if want.spare[0] != 0 && (roles[want.spare[0]] != "spare" || roles[want.spare[1]] != "standby" ||
		row.Spare == nil || row.Spare.PID != want.spare[0] || row.Spare.StandbyPID != want.spare[1]) {
		errorf("want the spare %d and its standby %d in their roles and in spare", want.spare[0], want.spare[1])
	}
	if want.noSpare && (has("standby") || has("spare") || row.Spare != nil) {
		errorf("a standby or spare, with --no-spare")
	}
	if !has("watcher") || (has("standby") && !has("standby-watcher")) {
		errorf("want a watcher for the supervisor and one for its standby")
	}
	if want.state == record.PhaseParked && len(row.PIDs) > 0 {
		errorf("pids %v: a parked kernel's tree is gone", row.PIDs)
	}
	// pids is the kernel's tree only: its kernel and tree processes.
	var tree []int
	for _, m := range row.Processes {
		if m.Role == "kernel" || m.Role == "tree" {
			tree = append(tree, m.PID)
		}
	}
	slices.Sort(tree)
	if got := slices.Sorted(slices.Values(row.PIDs)); !slices.Equal(got, tree) {
		errorf("pids %v, want the kernel's tree %v (its kernel and tree processes) only", got, tree)
	}
	for _, other := range rows {
		if other.KernelID == id && other.UID == row.UID {
			continue
		}
		for _, m := range other.Processes {
			if r, ok := roles[m.PID]; ok {
				errorf("process %d, its %s, is also %s of kernel %s:%s", m.PID, r, m.Role, other.User, other.KernelID)
			}
		}
	}
	for _, line := range strings.Split(stderr, "\n") {
		if line != "" && o.mentions(line, id, row) {
			errorf("said of this kernel on stderr: %s", line)
		}
	}
	return row
}

// checkTable checks ps's table: one line for the kernel id, its owner's,
// in its state, and nothing of it left its cgroup.
func (o *kernelOwner) checkTable(t *testing.T, what, table, id string, want identityWant) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, record.ShortID(id)+" ") {
			lines = append(lines, l)
		}
	}
	state := want.state
	if want.hold {
		state = "held"
	}
	if len(lines) != 1 || !slices.Contains(strings.Fields(lines[0]), o.name) || !slices.Contains(strings.Fields(lines[0]), state) ||
		strings.Contains(lines[0], "left its cgroup") {
		t.Errorf("%s: want one line for the kernel, %s's, %s, nothing of it out of its cgroup:\n%s", what, o.name, state, table)
	}
}

// mentions reports whether line names the kernel id, its owner, or one
// of its processes (as ps and doctor name processes: "process 123",
// "supervisor 123"; a bare number may be another's, a stale cgroup's
// dead creator's pid, say, reused).
func (o *kernelOwner) mentions(line, id string, row *psRow) bool {
	if strings.Contains(line, record.ShortID(id)) || strings.Contains(line, o.name) {
		return true
	}
	named := map[string]bool{}
	for _, m := range pidNamed.FindAllStringSubmatch(line, -1) {
		named[m[1]] = true
	}
	if uid := regexp.MustCompile(`\buid (\d+)\b`).FindStringSubmatch(line); uid != nil && uid[1] == strconv.Itoa(o.uid) {
		return true
	}
	if row != nil {
		for _, m := range row.Processes {
			if named[strconv.Itoa(m.PID)] {
				return true
			}
		}
	}
	return false
}

// pidNamed is how ps and doctor name a process.
var pidNamed = regexp.MustCompile(`\b(?:process|processes|pid|pids|supervisor|kernel|standby|spare|watcher|stub) \[?(\d+)\b`)

// kernelTopics are doctor's topics about kernels: the only problems
// another test's kernels, on a shared machine, may add to root's doctor.
var kernelTopics = []string{"stale kernel:", "stale cgroup:", "kernel record:", "kernel cgroup:", "kernels:"}

// checkDoctor checks what doctor said (its exit code and output) of the
// kernel id with the ps row: no problem and no "stale" about it, no
// advice to kill any process of it, and exit 0 unless (for root's,
// shared) every problem is about another test's kernels.
func (o *kernelOwner) checkDoctor(t *testing.T, what string, code int, out, id string, row *psRow, shared bool) {
	t.Helper()
	lines := strings.Split(out, "\n")
	var foreign []string
	for i, line := range lines {
		problem := strings.HasPrefix(line, "!! ")
		ours := o.mentions(line, id, row)
		if i > 0 && strings.HasPrefix(line, "   fix:") { // a fix belongs to the finding above it
			ours = ours || o.mentions(lines[i-1], id, row)
		}
		switch {
		case ours && (problem || strings.Contains(line, "stale") || strings.Contains(line, "kill")):
			t.Errorf("%s (exit %d) says of this kernel: %s\n%s", what, code, line, out)
		case problem && shared && slices.ContainsFunc(kernelTopics, func(p string) bool { return strings.HasPrefix(line[3:], p) }):
			foreign = append(foreign, line) // another test's, on a shared machine
		case problem:
			t.Errorf("%s (exit %d): %s\n%s", what, code, line, out)
		}
	}
	switch {
	case code == 0 && strings.Contains(out, "\nno problems\n"):
	case code != 0 && len(foreign) > 0:
		t.Logf("%s exits %d for other kernels than this test's:\n%s", what, code, strings.Join(foreign, "\n"))
	default:
		t.Errorf("%s exits %d:\n%s", what, code, out)
	}
}
