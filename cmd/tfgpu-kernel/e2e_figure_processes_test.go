//go:build linux && e2e

// docs/design.md's picture of one kernel's processes
// (docs/img/processes.svg, docs/design.md#processes): captured from a real
// kernel by testdata/e2e/processes.py and drawn by docs/img/processes.py;
// docs/img/processes.sh does both. The test asserts what the picture
// shows, and that the committed picture's source still has the shape of
// what ps shows today, so a picture that no longer holds fails the suite
// instead of staying in the design.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// roleServer is what the picture calls the process that launched the
// kernel: here the scenario, with jupyter_client's KernelManager, as
// Jupyter's server would.
const roleServer = "jupyter server"

// processesFigure is docs/img/processes.json, what docs/img/processes.py draws.
type processesFigure struct {
	Measured      string          `json:"measured"`
	How           string          `json:"how"`
	JupyterClient string          `json:"jupyter_client"`
	IPyKernel     string          `json:"ipykernel"`
	Moments       []processMoment `json:"moments"`
}

// processMoment is the kernel's processes at one moment, and the server.
type processMoment struct {
	Name        string `json:"name"`
	Label       string `json:"label"`
	KernelID    string `json:"kernel_id"`
	Containment string `json:"containment"` // ps's
	Cgroup      string `json:"cgroup"`      // the kernel's, as ps names it
	// Processes are the server, then ps's processes of the kernel in
	// ps's order.
	Processes []processEntry `json:"processes"`
}

// processEntry is one process: its role as root's `tfgpu-kernel ps
// --json` gives it (roleServer for the server), its command line as `ps -o
// args` shows it, and its cgroup in the containment's hierarchy, relative
// to the server's ("": the server's own, no cgroup of the kernel's).
type processEntry struct {
	PID    int    `json:"pid"`
	PPID   int    `json:"ppid"`
	Role   string `json:"role"`
	Args   string `json:"args"`
	Cgroup string `json:"cgroup"`
}

// processesFacts is what processes.py reports.
type processesFacts struct {
	JupyterClient string           `json:"jupyter_client"`
	IPyKernel     string           `json:"ipykernel"`
	Server        int              `json:"server"`
	Worker        int              `json:"worker"`
	Moments       []processCapture `json:"moments"`
}

// processCapture is one moment as processes.py saw it.
type processCapture struct {
	Name     string               `json:"name"`
	KernelID string               `json:"kernel_id"`
	PS       *record.KernelStatus `json:"ps"`           // root's ps row of the kernel
	Below    []int                `json:"below_server"` // every process below the server
	Procs    []processSeen        `json:"processes"`    // the server, then ps's processes
}

// processSeen is one process as processes.py saw it.
type processSeen struct {
	PID    int      `json:"pid"`
	PPID   int      `json:"ppid"`
	Role   string   `json:"role"`
	Args   string   `json:"args"`
	Cgroup []string `json:"cgroup"` // /proc/PID/cgroup's lines
}

// processesLabels are the moments processes.py captures, as the picture
// titles them.
var processesLabels = map[string]string{"running": "running, spare waiting", "restarted": "after a Restart"}

// TestE2EFigureProcesses runs processes.py (Debian's stack, the spare on,
// as root): a kernel with a worker in a session of its own, captured
// running with its spare waiting and again after one Restart with the
// next spare waiting. It asserts what the picture shows: every process
// below the server is one of the kernel's and has a role from ps, ps lists
// each pid once, the eight roles all appear (a tree process too), the
// launched `run` is the supervisor and after the Restart the stub, after
// it the supervisor is the standby and the kernel the spare of before
// (the same pids), the standby and the spare are never in the kernel's
// cgroup. It writes TFGPU_FIGURE_OUT/processes.json when that is set (and
// the assertions held), and compares the committed docs/img/processes.json
// with the capture by shape (processShape): a difference fails the test,
// unless the picture is being redrawn.
func TestE2EFigureProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root: the picture is of root's `tfgpu-kernel ps --json`")
	}
	s := e2eSetup(t)
	if !s.wrapped {
		t.Skip("the picture is of the supervisor's processes")
	}
	out := os.Getenv("TFGPU_FIGURE_OUT")
	if out != "" && !filepath.IsAbs(out) {
		t.Fatalf("TFGPU_FIGURE_OUT=%s: want an absolute path (go test runs in the package's directory)", out)
	}
	gs := *s
	gs.env = append(append([]string{}, s.env...), "E2E_TFGPU_BIN="+s.bin)
	res := gs.scenario(t, 120*time.Second, "processes.py")
	fig, err := processesFigureOf(res.Facts)
	testutil.NoErr(t, err)
	if t.Failed() { // survivors: what was captured is not what the picture should show
		return
	}
	// Read before it may be overwritten: TFGPU_FIGURE_OUT is docs/img.
	committed, cerr := os.ReadFile(filepath.Join("..", "..", "docs", "img", "processes.json"))
	data, err := json.MarshalIndent(fig, "", "  ")
	testutil.NoErr(t, err)
	data = append(data, '\n')
	dirs := []string{t.TempDir()}
	if out != "" {
		dirs = append(dirs, out)
	}
	for _, dir := range dirs {
		testutil.NoErr(t, os.WriteFile(filepath.Join(dir, "processes.json"), data, 0o644))
	}
	t.Logf("processes written to %s", strings.Join(dirs, ", "))
	if cerr != nil {
		if out == "" {
			t.Fatalf("the picture's source: %v (docs/img/processes.sh makes it)", cerr)
		}
		t.Logf("the picture's source: %v; drawn anew", cerr)
		return
	}
	var old processesFigure
	if err := json.Unmarshal(committed, &old); err != nil {
		t.Fatalf("docs/img/processes.json: %v", err)
	}
	if diff := diffProcessShapes(old, fig); len(diff) > 0 {
		say := t.Errorf
		if out != "" {
			say = t.Logf // being redrawn: the new one is what ps shows
		}
		say("docs/img/processes.json, the picture's source, is not what ps shows today (docs/img/processes.sh redraws it):\n  %s",
			strings.Join(diff, "\n  "))
	}
}

// processesFigureOf checks processes.py's facts against what the picture
// shows and makes them the picture's source.
func processesFigureOf(facts map[string]any) (processesFigure, error) {
	var f processesFacts
	b, err := json.Marshal(facts)
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		return processesFigure{}, fmt.Errorf("processes.py's facts: %w", err)
	}
	fig := processesFigure{
		Measured:      time.Now().UTC().Format("2006-01-02"),
		How:           "TestE2EFigureProcesses (cmd/tfgpu-kernel/testdata/e2e/processes.py), root, Debian's Jupyter stack, the spare on",
		JupyterClient: f.JupyterClient,
		IPyKernel:     f.IPyKernel,
	}
	if len(f.Moments) != 2 || f.Moments[0].Name != "running" || f.Moments[1].Name != "restarted" {
		return fig, fmt.Errorf("processes.py captured %d moments, want running and restarted", len(f.Moments))
	}
	var errs []string
	for _, m := range f.Moments {
		pm, err := processMomentOf(m, f.Server)
		if err != nil {
			errs = append(errs, err.Error())
		}
		fig.Moments = append(fig.Moments, pm)
	}
	errs = append(errs, checkProcessesFigure(fig, f.Worker)...)
	if len(errs) > 0 {
		return fig, fmt.Errorf("the picture does not hold:\n  %s", strings.Join(errs, "\n  "))
	}
	return fig, nil
}

// processMomentOf is one captured moment as the picture's source: the
// server, then each process ps lists for the kernel, in its role, with its
// cgroup relative to the server's. It fails where ps lists a pid twice,
// gives a role that is none of record.Role's, or leaves out a process
// below the server.
func processMomentOf(c processCapture, server int) (processMoment, error) {
	m := processMoment{Name: c.Name, Label: processesLabels[c.Name], KernelID: c.KernelID}
	if c.PS == nil {
		return m, fmt.Errorf("%s: root's ps --json does not list kernel %s", c.Name, c.KernelID)
	}
	m.Containment, m.Cgroup = c.PS.Containment, c.PS.Cgroup
	if len(c.Procs) != len(c.PS.Processes)+1 || c.Procs[0].PID != server || c.Procs[0].Role != roleServer {
		return m, fmt.Errorf("%s: processes.py saw %d processes, want the server %d and ps's %d", c.Name, len(c.Procs), server, len(c.PS.Processes))
	}
	var errs []string
	listed := map[int]bool{}
	for _, p := range c.PS.Processes {
		if listed[p.PID] {
			errs = append(errs, fmt.Sprintf("ps lists pid %d twice: %v", p.PID, c.PS.Processes))
		}
		listed[p.PID] = true
		if !slices.Contains(allRoles, p.Role) {
			errs = append(errs, fmt.Sprintf("ps calls pid %d %q, none of the roles %v", p.PID, p.Role, allRoles))
		}
	}
	for _, p := range c.Below {
		if !listed[p] {
			errs = append(errs, fmt.Sprintf("pid %d is below the server but ps gives it no role: %s", p, strings.Join(e2eDescribe([]int{p}), "")))
		}
	}
	base := cgroupIn(c.Procs[0].Cgroup, m.Containment)
	for _, p := range c.Procs {
		if p.Args == "" {
			errs = append(errs, fmt.Sprintf("ps -o args shows nothing of pid %d (%s)", p.PID, p.Role))
		}
		m.Processes = append(m.Processes, processEntry{PID: p.PID, PPID: p.PPID, Role: p.Role, Args: p.Args,
			Cgroup: relativeCgroup(cgroupIn(p.Cgroup, m.Containment), base)})
	}
	if len(errs) > 0 {
		return m, fmt.Errorf("%s: %s", c.Name, strings.Join(errs, "; "))
	}
	return m, nil
}

// allRoles are the roles a kernel's process may have (record.Role), in
// ps's order.
var allRoles = []record.Role{record.RoleStub, record.RoleSupervisor, record.RoleWatcher, record.RoleKernel, record.RoleTree,
	record.RoleStandby, record.RoleStandbyWatcher, record.RoleSpare}

// cgroupIn is the cgroup path in the hierarchy the containment uses, from
// /proc/PID/cgroup's lines: v1's freezer, else cgroup2's ("0::"); "" in the
// proc mode, which has none.
func cgroupIn(lines []string, containment string) string {
	if containment == cgroup.ModeProc || containment == "" {
		return ""
	}
	for _, l := range lines {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if containment == cgroup.ModeV1 && slices.Contains(strings.Split(f[1], ","), "freezer") ||
			containment != cgroup.ModeV1 && f[0] == "0" {
			return f[2]
		}
	}
	return ""
}

// relativeCgroup is path relative to base: "" when it is base itself.
func relativeCgroup(path, base string) string {
	if path == base {
		return ""
	}
	if rel, ok := strings.CutPrefix(path, strings.TrimSuffix(base, "/")+"/"); ok {
		return rel
	}
	return path
}

// checkProcessesFigure is what the picture shows of both moments, as
// failures: who is who, which pid changed roles across the Restart, and
// which cgroups hold what.
func checkProcessesFigure(fig processesFigure, worker int) []string {
	var errs []string
	seen := map[string]bool{}
	want := map[string]map[string]int{ // how many of each role the picture draws
		"running":   {"supervisor": 1, "watcher": 1, "kernel": 1, "standby": 1, "standby-watcher": 1, "spare": 1, "stub": 0},
		"restarted": {"supervisor": 1, "watcher": 1, "kernel": 1, "standby": 1, "standby-watcher": 1, "spare": 1, "stub": 1},
	}
	launched := map[string]string{"running": "supervisor", "restarted": "stub"}
	for _, m := range fig.Moments {
		n := map[string]int{}
		for _, p := range m.Processes[1:] {
			n[p.Role]++
			seen[p.Role] = true
		}
		for role, w := range want[m.Name] {
			if n[role] != w {
				errs = append(errs, fmt.Sprintf("%s: %d processes in role %s, want %d", m.Name, n[role], role, w))
			}
		}
		var kids []processEntry
		for _, p := range m.Processes[1:] {
			if p.PPID == m.Processes[0].PID {
				kids = append(kids, p)
			}
		}
		if len(kids) != 1 || kids[0].Role != launched[m.Name] || !strings.Contains(kids[0].Args, " run ") {
			errs = append(errs, fmt.Sprintf("%s: the server's children are %v, want one: the launched `run`, the %s", m.Name, kids, launched[m.Name]))
		}
		errs = append(errs, checkProcessCgroups(m)...)
	}
	for _, r := range allRoles {
		if !seen[string(r)] {
			errs = append(errs, fmt.Sprintf("no process in role %s in either moment", r))
		}
	}
	before, after := fig.Moments[0], fig.Moments[1]
	if !slices.ContainsFunc(before.Processes, func(e processEntry) bool { return e.PID == worker && e.Role == "tree" }) {
		errs = append(errs, fmt.Sprintf("running: the worker %d is not a tree process", worker))
	}
	for _, c := range []struct{ now, was string }{{"supervisor", "standby"}, {"kernel", "spare"}} {
		if a, b := processOf(after, c.now), processOf(before, c.was); a == nil || b == nil || a.PID != b.PID {
			errs = append(errs, fmt.Sprintf("after the Restart the %s is %v, want the %s of before, %v", c.now, a, c.was, b))
		}
	}
	return errs
}

// checkProcessCgroups: the kernel's tree is in the kernel's cgroup, the
// standby, its watcher and its spare are not (a cgroup containment).
func checkProcessCgroups(m processMoment) []string {
	k := processOf(m, "kernel")
	if m.Containment == cgroup.ModeProc || k == nil {
		return nil
	}
	var errs []string
	if k.Cgroup == "" || !strings.HasSuffix(m.Cgroup, "/"+k.Cgroup) {
		errs = append(errs, fmt.Sprintf("%s: the kernel is in cgroup %q, ps says the kernel's is %q", m.Name, k.Cgroup, m.Cgroup))
	}
	in := func(p processEntry) bool { return p.Cgroup == k.Cgroup || strings.HasPrefix(p.Cgroup, k.Cgroup+"/") }
	for _, p := range m.Processes {
		if slices.Contains(record.SpareRoles, record.Role(p.Role)) && in(p) || p.Role == "tree" && !in(p) {
			errs = append(errs, fmt.Sprintf("%s: the %s %d is in cgroup %q, the kernel's is %q", m.Name, p.Role, p.PID, p.Cgroup, k.Cgroup))
		}
	}
	return errs
}

// processOf is the first process in role, nil when there is none.
func processOf(m processMoment, role string) *processEntry {
	for i := range m.Processes {
		if m.Processes[i].Role == role {
			return &m.Processes[i]
		}
	}
	return nil
}

// diffProcessShapes says how the shapes of two captures differ, moment by
// moment (processShape); nothing when they are alike.
func diffProcessShapes(committed, live processesFigure) []string {
	var out []string
	if len(committed.Moments) != len(live.Moments) {
		return []string{fmt.Sprintf("%d moments, ps shows %d", len(committed.Moments), len(live.Moments))}
	}
	for i, m := range live.Moments {
		was, now := processShape(committed.Moments[i]), processShape(m)
		for _, l := range was {
			if !slices.Contains(now, l) {
				out = append(out, fmt.Sprintf("%s: the picture has %s; ps shows none", m.Name, l))
			}
		}
		for _, l := range now {
			if !slices.Contains(was, l) {
				out = append(out, fmt.Sprintf("%s: ps shows %s; the picture has none", m.Name, l))
			}
		}
	}
	return out
}

// processShape is what a picture of m shows whatever the run: the roles,
// the parent→child edges between roles ("outside" for a parent that is
// none of them), and each role's command line with paths, ids and numbers
// masked (maskArgs); sorted, each once.
func processShape(m processMoment) []string {
	role := map[int]string{}
	for _, p := range m.Processes {
		role[p.PID] = p.Role
	}
	var out []string
	for _, p := range m.Processes {
		parent, ok := role[p.PPID]
		if !ok {
			parent = "outside"
		}
		out = append(out, "role "+p.Role, "edge "+parent+" → "+p.Role, fmt.Sprintf("%s: %q", p.Role, maskArgs(p.Args)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

var (
	maskUUID    = regexp.MustCompile(`\b[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\b`)
	maskShortID = regexp.MustCompile(`\b[0-9a-f]{8}\b`) // record.ShortID, as the spare's title shows it
	maskNumber  = regexp.MustCompile(`\b[0-9]+\b`)
)

// maskArgs is a command line with what differs between runs masked: each
// absolute path is its last element, kernel ids are ID and numbers N.
func maskArgs(args string) string {
	f := strings.Fields(args)
	for i, a := range f {
		if strings.HasPrefix(a, "/") {
			f[i] = filepath.Base(a)
		}
	}
	s := maskUUID.ReplaceAllString(strings.Join(f, " "), "ID")
	return maskNumber.ReplaceAllString(maskShortID.ReplaceAllString(s, "ID"), "N")
}
