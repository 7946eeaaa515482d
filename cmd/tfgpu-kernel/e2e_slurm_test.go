//go:build linux && e2e

// TestE2ESlurm: the supervisor inside Slurm 22.05 batch jobs (issue 24,
// deliverable 4, the Slurm half), on a one-node cluster the test runs
// itself: munged, slurmctld and slurmd as its children, everything in a
// temporary directory (testdata/engines/slurm: the config templates, the
// job script, the Python driver run inside the jobs).
//
// Per configuration (a subtest, each a fresh cluster):
//
//	cgroup-hybrid     proctrack/cgroup, task/cgroup, the host as it is
//	linuxproc-hybrid  proctrack/linuxproc, task/affinity
//	cgroup-v1only     as cgroup-hybrid, slurmd (and so every job) in a mount
//	linuxproc-v1only  namespace where /sys/fs/cgroup/unified is unmounted
//
// jobs run the driver (Debian's jupyter_client starting the "tfgpu"
// kernelspec, as a notebook server in a job does):
//
//  1. restart inside the job: a setsid'd double-forked SIGTERM-ignoring
//     daemon of the kernel is gone after restart_kernel() (waited for, the
//     time noted), the new kernel answers;
//  2. scancel: with such a daemon running again (in the cgroup
//     configurations, in the fresh kernel started after a park: every
//     generation of a kernel stays in the job's cgroups, #32), the test scancels the job
//     and waits (e2eSurviveWait, well under KillWait, the time logged) until
//     the daemon, the kernel and the supervisor are gone (neither alive nor
//     zombie), the job's Slurm cgroups removed and no tfgpu-* cgroup of the
//     kernel left;
//     then logs `tfgpu-kernel ps`, and "whoever comes next": a second job
//     starts a kernel, after which the first kernel's record and inner
//     directory are gone;
//  3. (cgroup configurations) the job's memory limit (--mem=400M): a cell
//     touching 1.5 GB is killed and told of the Slurm job's limit; a kernel
//     given TFGPU_MEMORY_LIMIT in a job says the limit is not applied and
//     the job's 400 MiB holds; (linuxproc configurations, no memory cgroup
//     of the job's) such a kernel says no memory limit applies.
//
// Besides, it times Slurm's kill: a probe process of the job notes when
// SIGTERM reaches it and lives on, so its death is slurmstepd's SIGKILL.
//
//	CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go test -tags e2e -run TestE2ESlurm -v -count=1 ./cmd/tfgpu-kernel/
//
// Needs root, the host's cgroup v1 freezer and memory hierarchies, and
// Debian's slurm-wlm and munge (installed with apt-get when missing).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// slurmConf is one configuration of the cluster.
type slurmConf struct {
	name      string
	proctrack string
	task      string
	v1only    bool // slurmd and its jobs see no cgroup2 mount
}

// cgroups reports whether Slurm contains and limits jobs with cgroups
// here (the memory limit is checked only then).
func (c slurmConf) cgroups() bool { return c.proctrack == "proctrack/cgroup" }

var slurmConfs = []slurmConf{
	{"cgroup-hybrid", "proctrack/cgroup", "task/cgroup", false},
	{"linuxproc-hybrid", "proctrack/linuxproc", "task/affinity", false},
	{"cgroup-v1only", "proctrack/cgroup", "task/cgroup", true},
	{"linuxproc-v1only", "proctrack/linuxproc", "task/affinity", true},
}

const (
	// slurmKillWait is the cluster's KillWait (Slurm's default: 30 s):
	// how long slurmd waits between SIGTERM and SIGKILL while a step's
	// processes live on. Well over e2eSurviveWait, the longest the test
	// waits for the kernel's tree to go after scancel (a bound only a
	// failure reaches; docs/design.md#lifecycle's 2 s is a figure, logged,
	// not asserted), so that what went was not killed by this escalation.
	slurmKillWait = 60
	// What the cells are told in a job with --mem=400M: killed at the
	// job's limit; and, given TFGPU_MEMORY_LIMIT, that it is not applied
	// and which limit holds: the job's (the cgroup configurations:
	// task/cgroup, ConstrainRAMSpace=yes), or none, as the job has no
	// memory cgroup of its own (the linuxproc ones: task/affinity; what
	// holds slurmd, if anything, is the host's, #36 item 2).
	slurmMemText = "the Slurm job's memory limit of 400 MiB"
	// {job} is the job's id (the driver puts it in).
	slurmLimitText   = "is not applied inside Slurm job {job}: the job's own memory limit (400 MiB) applies to the kernel"
	slurmNoLimitText = "is not applied inside Slurm job {job}: the job has no memory limit"
)

// limitText is what a kernel given TFGPU_MEMORY_LIMIT is told in this
// configuration's jobs.
func (c slurmConf) limitText() string {
	if c.cgroups() {
		return slurmLimitText
	}
	return slurmNoLimitText
}

// ---------------------------------------------------------------- the test

func TestE2ESlurm(t *testing.T) {
	h := newSlurmHost(t, e2eSetup(t))
	for _, c := range slurmConfs {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			defer func() { t.Logf("configuration %s took %v", c.name, time.Since(start).Round(100*time.Millisecond)) }()
			if !c.v1only && !slurmIsV2("/sys/fs/cgroup/unified") {
				t.Skip("no cgroup2 mount at /sys/fs/cgroup/unified: not a hybrid host (the v1only configurations run on it as it is)")
			}
			cl := h.newCluster(t, c)
			cl.scenario(t)
		})
	}
}

// scenario is one configuration's jobs, in order.
func (cl *slurmCluster) scenario(t *testing.T) {
	// 1 and 2: restart inside the job, then scancel.
	jobA := cl.sbatch(t, "restart-scancel")
	restart := cl.waitResult(t, jobA, "restart.json", 90*time.Second)
	t.Logf("job %s, restart inside the job: %s", jobA, restart.summary())
	if !restart.OK {
		t.Errorf("restart inside job %s: %s", jobA, strings.Join(restart.Errors, "\n  "))
	}
	if restart.Facts == nil {
		t.Fatalf("job %s never reported its restart\n%s", jobA, cl.jobLogs(jobA))
	}
	var ready slurmReady
	cl.waitJSON(t, jobA, "ready.json", 60*time.Second, &ready)
	if ready.Error != "" || ready.Supervisor == 0 {
		t.Fatalf("job %s could not start the children for scancel: %s\n%s", jobA, ready.Error, cl.jobLogs(jobA))
	}
	cl.kernelIDs = append(cl.kernelIDs, ready.KernelID)
	cl.scancel(t, jobA, &ready)

	// "Whoever comes next": the record and inner directory of the kernel
	// scancel ended are gone once another kernel started on the node.
	cl.ps(t, "after the scancel, before the next job")
	recordFile := filepath.Join(cl.state, ready.KernelID+".json")
	jobB := cl.sbatch(t, "next")
	next := cl.waitResult(t, jobB, "next.json", 90*time.Second)
	t.Logf("job %s, the next kernel: %s", jobB, next.summary())
	if !next.OK {
		t.Errorf("the next job %s: %s", jobB, strings.Join(next.Errors, "\n  "))
	}
	if id, _ := next.Facts["kernel_id"].(string); id != "" {
		cl.kernelIDs = append(cl.kernelIDs, id)
	}
	cl.waitJobGone(t, jobB, 10*time.Second)
	if _, err := os.Stat(recordFile); err == nil {
		t.Errorf("after the next job's kernel, the record of the kernel scancel ended is still there: %s", recordFile)
	}
	if ready.record.InnerDir != "" {
		if _, err := os.Stat(ready.record.InnerDir); err == nil {
			t.Errorf("after the next job's kernel, the inner directory of the kernel scancel ended is still there: %s", ready.record.InnerDir)
		}
	} else {
		t.Errorf("the record of the scancelled kernel named no inner directory (read before the scancel: %+v)", ready.record)
	}
	if left := slurmNamesWith(cl.state, ready.KernelID, filepath.Base(recordFile)); len(left) > 0 {
		t.Errorf("after the next job's kernel, the state directory still holds files of the kernel scancel ended: %s", strings.Join(left, ", "))
	}
	if left := slurmCgroupsOf([]string{ready.KernelID}); len(left) > 0 {
		t.Errorf("after the next job's kernel, cgroups of the kernel scancel ended are left: %s", strings.Join(left, ", "))
	}
	cl.ps(t, "after the next job")

	// 3: the job's memory limit.
	if cl.c.cgroups() {
		jobC := cl.sbatch(t, "memory", "--mem=400M")
		mem := cl.waitResult(t, jobC, "memory.json", 120*time.Second)
		t.Logf("job %s (--mem=400M), memory: %s", jobC, mem.summary())
		for _, k := range []string{"oom_cell_stderr", "limit_first_cells_stderr"} {
			if v, ok := mem.Facts[k]; ok {
				t.Logf("  %s: %q", k, v)
			}
		}
		if !mem.OK {
			t.Errorf("memory job %s:\n  %s", jobC, strings.Join(mem.Errors, "\n  "))
		}
		for _, k := range []string{"kernel_id_oom", "kernel_id_limit"} {
			if id, _ := mem.Facts[k].(string); id != "" {
				cl.kernelIDs = append(cl.kernelIDs, id)
			}
		}
		cl.waitJobGone(t, jobC, 15*time.Second)
		if out, err := os.ReadFile(filepath.Join(cl.out, "memory.err")); err == nil {
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "oom-kill") {
					t.Logf("  Slurm told the job: %s", l)
				}
			}
		}
	} else {
		// No memory cgroup of the job's: --mem=400M limits nothing, and a
		// kernel given TFGPU_MEMORY_LIMIT is told that none applies.
		jobC := cl.sbatch(t, "limit", "--mem=400M")
		lim := cl.waitResult(t, jobC, "limit.json", 120*time.Second)
		t.Logf("job %s (--mem=400M, no memory cgroup), limit: %s", jobC, lim.summary())
		if v, ok := lim.Facts["limit_first_cells_stderr"]; ok {
			t.Logf("  limit_first_cells_stderr: %q", v)
		}
		if !lim.OK {
			t.Errorf("limit job %s:\n  %s", jobC, strings.Join(lim.Errors, "\n  "))
		}
		if id, _ := lim.Facts["kernel_id_limit"].(string); id != "" {
			cl.kernelIDs = append(cl.kernelIDs, id)
		}
		cl.waitJobGone(t, jobC, 15*time.Second)
	}

	// Nothing of any job is left: processes, Slurm's job cgroups, the
	// kernels' cgroups.
	cl.checkNothingLeft(t)
}

// ---------------------------------------------------------------- host

// newSlurmHost is what every test on the one-node cluster needs first
// (TestE2ESlurm, TestE2EHub): root, the host's v1 freezer and memory
// hierarchies, Slurm's and munge's commands (installed when missing), no
// Slurm of the host's running, the reaper, the node's figures, munged.
func newSlurmHost(t *testing.T, s *e2eSuite) *slurmHost {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "%s needs root: it runs munged, slurmctld and slurmd (SlurmUser=root), installs slurm-wlm and munge with apt-get when missing, and reads and removes the jobs' cgroups", t.Name())
	}
	for _, ctrl := range []string{"freezer", "memory"} {
		if !slurmIsV1(ctrl) {
			// The host's layout, not something to install: a skip in CI too.
			t.Skipf("needs the cgroup v1 %s hierarchy at /sys/fs/cgroup/%s (a hybrid or v1 host): Slurm's cgroup/v1 plugin and the v1-only configurations use it; this host has none", ctrl, ctrl)
		}
	}
	tools := slurmTools(t)
	if others := slurmForeignDaemons(); len(others) > 0 {
		t.Skipf("Slurm already runs on this host (%s): the test's cluster would share the /sys/fs/cgroup/*/slurm* cgroups and the node name with it", strings.Join(others, "; "))
	}
	h := &slurmHost{s: s, tools: tools, dir: t.TempDir(), baseline: slurmCgroupDirs()}
	if h.engine, _ = filepath.Abs(filepath.Join("testdata", "engines", "slurm")); h.engine == "" {
		t.Fatal("no testdata/engines/slurm")
	}
	h.r = newSlurmReaper(t)
	h.node, h.cpus, h.mem = slurmNodeSpec(t, tools["slurmd"])
	h.startMunge(t)
	return h
}

// slurmHost is what the configurations share: the suite, Slurm's commands,
// munged and the node's figures.
type slurmHost struct {
	s        *e2eSuite
	tools    map[string]string
	dir      string
	engine   string // absolute testdata/engines/slurm
	r        *slurmReaper
	node     string
	cpus     int
	mem      int // MiB for RealMemory
	munge    string
	baseline map[string]bool // cgroup directories before the test: never removed
}

var slurmToolNames = []string{"slurmctld", "slurmd", "sbatch", "scancel", "squeue", "sinfo", "scontrol", "munged", "munge"}

func slurmLook(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/sbin"} {
		if fi, err := os.Stat(filepath.Join(d, name)); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(d, name)
		}
	}
	return ""
}

// slurmTools finds Slurm's and munge's commands, installing Debian's
// slurm-wlm and munge when one is missing. The packages' maintainer
// scripts would start the system's munged and slurmd: a policy-rc.d,
// made only when there is none and removed after, says no.
func slurmTools(t *testing.T) map[string]string {
	t.Helper()
	find := func() (map[string]string, []string) {
		m, missing := map[string]string{}, []string(nil)
		for _, n := range slurmToolNames {
			if m[n] = slurmLook(n); m[n] == "" {
				missing = append(missing, n)
			}
		}
		return m, missing
	}
	tools, missing := find()
	if len(missing) == 0 {
		return tools
	}
	apt := slurmLook("apt-get")
	if apt == "" {
		testutil.RequireOrSkip(t, "needs slurm-wlm and munge (missing %s) and there is no apt-get to install them", strings.Join(missing, ", "))
	}
	const policy = "/usr/sbin/policy-rc.d"
	if _, err := os.Lstat(policy); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err == nil {
			defer os.Remove(policy)
		}
	}
	install := func() ([]byte, error) {
		c := exec.Command(apt, "install", "-y", "slurm-wlm", "munge")
		c.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return c.CombinedOutput()
	}
	t.Logf("missing %s: apt-get install -y slurm-wlm munge", strings.Join(missing, ", "))
	out, err := install()
	if err != nil {
		if up, uerr := exec.Command(apt, "update").CombinedOutput(); uerr != nil {
			out = append(out, up...)
		} else {
			out, err = install()
		}
	}
	if tools, missing = find(); len(missing) > 0 {
		testutil.RequireOrSkip(t, "needs slurm-wlm and munge: apt-get install -y slurm-wlm munge failed (%v), still missing %s:\n%s", err, strings.Join(missing, ", "), e2eTail(string(out), 3000))
	}
	return tools
}

// slurmForeignDaemons lists Slurm and munge daemons already running here
// (not the test's: it has started none yet).
func slurmForeignDaemons() []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		switch c := strings.TrimSpace(string(comm)); c {
		case "slurmctld", "slurmd", "slurmstepd":
			if st, _, ok := testutil.ProcStat(mustAtoi(e.Name())); ok && st != 'Z' {
				out = append(out, fmt.Sprintf("%s pid %s", c, e.Name()))
			}
		}
	}
	return out
}

func mustAtoi(s string) int { n, _ := strconv.Atoi(s); return n }

// slurmNodeSpec is the node as slurmd sees it (slurmd -C): its name, its
// CPUs, and RealMemory a little under what it has (at most 8 GiB), so that
// slurmd never finds less than configured and drains the node.
func slurmNodeSpec(t *testing.T, slurmd string) (string, int, int) {
	t.Helper()
	out, err := exec.Command(slurmd, "-C").Output()
	if err != nil {
		t.Fatalf("slurmd -C: %v", err)
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	cpus, _ := strconv.Atoi(kv["CPUs"])
	mem, _ := strconv.Atoi(kv["RealMemory"])
	if kv["NodeName"] == "" || cpus < 1 || mem < 2048 {
		t.Fatalf("slurmd -C: want a node name, CPUs and at least 2 GiB: %s", out)
	}
	mem = min(mem*9/10, 8192)
	return kv["NodeName"], cpus, mem
}

// startMunge runs munged in the foreground with its key, socket, pid, log
// and seed in the test's directory. As root it needs --force (it wants
// to run as the munge user, with a key only that user reads); the key is
// 1 KiB from /dev/urandom, mode 0400.
func (h *slurmHost) startMunge(t *testing.T) {
	t.Helper()
	dir := filepath.Join(h.dir, "munge")
	testutil.NoErr(t, os.Mkdir(dir, 0o755))
	key := filepath.Join(dir, "munge.key")
	rnd := make([]byte, 1024)
	f, err := os.Open("/dev/urandom")
	if err == nil {
		_, err = f.Read(rnd)
		f.Close()
	}
	if err != nil || os.WriteFile(key, rnd, 0o400) != nil {
		t.Fatalf("munge key: %v", err)
	}
	h.munge = filepath.Join(dir, "munge.socket")
	cmd := exec.Command(h.tools["munged"], "-F", "--force", "--key-file="+key, "--socket="+h.munge,
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--log-file="+filepath.Join(dir, "munged.log"),
		"--seed-file="+filepath.Join(dir, "munged.seed"), "--num-threads=4")
	var log testutil.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := h.r.start(cmd); err != nil {
		t.Fatalf("start munged: %v", err)
	}
	t.Cleanup(func() { h.r.stopDaemon(t, "munged", cmd) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := exec.Command(h.tools["munge"], "-n", "-S", h.munge)
		if _, err := h.r.output(c); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("munged did not answer on %s within 10 s:\n%s", h.munge, e2eTail(log.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------------------------------------------------------------- cluster

// slurmCluster is one configuration's cluster and what its jobs left.
type slurmCluster struct {
	h         *slurmHost
	c         slurmConf
	dir       string
	conf      string
	out       string // the jobs' result files and output
	state     string // TFGPU_STATE_DIR of every kernel in the jobs
	tag       string // E2E_TAG of everything the jobs run
	env       []string
	ctldLog   *testutil.Buffer
	slurmdLog *testutil.Buffer
	jobs      []string
	kernelIDs []string
}

var slurmNextJobID = 1000 + (os.Getpid()%1000)*1000

func (h *slurmHost) newCluster(t *testing.T, c slurmConf) *slurmCluster {
	t.Helper()
	cl := &slurmCluster{h: h, c: c, dir: t.TempDir(), tag: e2eTag(t), ctldLog: &testutil.Buffer{}, slurmdLog: &testutil.Buffer{}}
	cl.conf = filepath.Join(cl.dir, "slurm.conf")
	cl.out = filepath.Join(cl.dir, "out")
	cl.state = testutil.PrivateDir(t)
	for _, d := range []string{"state", "spool", "log", "out", "tmp"} {
		testutil.NoErr(t, os.MkdirAll(filepath.Join(cl.dir, d), 0o755))
	}
	ports := slurmFreePorts(t, 2)
	slurmNextJobID += 100
	vars := map[string]any{
		"Node": h.node, "CPUs": h.cpus, "RealMemory": h.mem, "CtldPort": ports[0], "SlurmdPort": ports[1],
		"MungeSocket": h.munge, "Dir": cl.dir, "Proctrack": c.proctrack, "Task": c.task,
		"KillWait": slurmKillWait, "FirstJobID": slurmNextJobID,
	}
	for _, name := range []string{"slurm.conf", "cgroup.conf"} {
		tmpl, err := template.ParseFiles(filepath.Join(h.engine, name+".tmpl"))
		testutil.NoErr(t, err)
		var b bytes.Buffer
		testutil.NoErr(t, tmpl.Execute(&b, vars))
		testutil.NoErr(t, os.WriteFile(filepath.Join(cl.dir, name), b.Bytes(), 0o644))
	}

	// The jobs' environment: sbatch exports its own (--export=ALL).
	var env []string
	for _, kv := range h.s.env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "SBATCH_") || strings.HasPrefix(k, "SALLOC_") || strings.HasPrefix(k, "SRUN_") {
			continue
		}
		env = append(env, kv)
	}
	tmp := filepath.Join(cl.dir, "tmp")
	cl.env = append(env, "SLURM_CONF="+cl.conf, "TFGPU_STATE_DIR="+cl.state,
		"E2E_TAG="+cl.tag, "E2E_TMP="+tmp, "IPYTHONDIR="+filepath.Join(tmp, "ipython"), "XDG_RUNTIME_DIR="+e2eXDG(t),
		"E2E_SLURM_OUT="+cl.out, "E2E_SCRIPTS="+h.s.scripts, "E2E_SLURM_DRIVER="+filepath.Join(h.engine, "driver.py"),
		"E2E_SLURM_MEM_TEXT="+slurmMemText, "E2E_SLURM_LIMIT_TEXT="+c.limitText(), "E2E_TFGPU_BIN="+h.s.bin)
	if c.cgroups() {
		cl.env = append(cl.env, "E2E_SLURM_PARK=1")
	}

	// The daemons get a tag of their own: what carries the jobs' E2E_TAG
	// is a job's, what carries this one is slurmd's (slurmstepd).
	denv := append(e2eCleanEnv(), "SLURM_CONF="+cl.conf, "E2E_SLURM_DAEMON="+cl.tag)
	ctld := exec.Command(h.tools["slurmctld"], "-D")
	ctld.Env, ctld.Stdout, ctld.Stderr, ctld.Dir = denv, cl.ctldLog, cl.ctldLog, cl.dir
	var slurmd *exec.Cmd
	if c.v1only && slurmIsV2("/sys/fs/cgroup/unified") {
		// A mount namespace of slurmd's own in which the cgroup2 tree is
		// unmounted: slurmd, its slurmstepds and the jobs see v1 only.
		slurmd = exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
			`umount /sys/fs/cgroup/unified || exit 97; exec "$0" -D`, h.tools["slurmd"])
	} else {
		slurmd = exec.Command(h.tools["slurmd"], "-D")
	}
	slurmd.Env, slurmd.Stdout, slurmd.Stderr, slurmd.Dir = denv, cl.slurmdLog, cl.slurmdLog, cl.dir
	// Cleanups run last-registered first: the daemons stop after the jobs
	// and their leftovers are gone, the cgroups are removed last of all.
	t.Cleanup(func() { cl.removeCgroups(t) })
	if err := h.r.start(ctld); err != nil {
		t.Fatalf("start slurmctld: %v", err)
	}
	t.Cleanup(func() { h.r.stopDaemon(t, "slurmctld", ctld) })
	if err := h.r.start(slurmd); err != nil {
		t.Fatalf("start slurmd: %v", err)
	}
	t.Cleanup(func() { h.r.stopDaemon(t, "slurmd", slurmd) })
	t.Cleanup(func() { cl.endJobs(t) })

	// The node is up once sinfo says idle.
	deadline := time.Now().Add(45 * time.Second)
	var last string
	for {
		out, err := cl.slurm("sinfo", "-h", "-N", "-o", "%N %t")
		last = strings.TrimSpace(out)
		if err == nil && last == h.node+" idle" {
			break
		}
		if time.Now().After(deadline) || slurmExited(slurmd) || slurmExited(ctld) {
			t.Fatalf("the node never became idle (sinfo: %q)\nslurmctld:\n%s\nslurmd:\n%s\n%s", last,
				e2eTail(cl.ctldLog.String(), 3000), e2eTail(cl.slurmdLog.String(), 3000), cl.daemonLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("cluster up: %s, %s, KillWait=%d, node %s (%d CPUs, %d MiB)%s", c.proctrack, c.task, slurmKillWait, h.node, h.cpus, h.mem,
		map[bool]string{true: ", slurmd without /sys/fs/cgroup/unified", false: ""}[c.v1only])
	return cl
}

func slurmExited(c *exec.Cmd) bool { return c.ProcessState != nil || !e2eLive(c.Process.Pid) }

func slurmFreePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", ":0")
		testutil.NoErr(t, err)
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// slurm runs one of Slurm's client commands against the cluster.
func (cl *slurmCluster) slurm(name string, args ...string) (string, error) {
	c := exec.Command(cl.h.tools[name], args...)
	c.Env, c.Dir = cl.env, cl.out
	out, err := cl.h.r.output(c)
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (cl *slurmCluster) daemonLogs() string {
	var b strings.Builder
	for _, f := range []string{"slurmctld.log", "slurmd.log"} {
		data, _ := os.ReadFile(filepath.Join(cl.dir, "log", f))
		fmt.Fprintf(&b, "---- end of %s ----\n%s\n", f, e2eTail(string(data), 4000))
	}
	return b.String()
}

// sbatch submits job.sh PART with the extra options; its output goes to
// OUT/PART.out and OUT/PART.err.
func (cl *slurmCluster) sbatch(t *testing.T, part string, extra ...string) string {
	t.Helper()
	args := append([]string{"--parsable", "-J", "tfgpu-" + part, "-o", filepath.Join(cl.out, part+".out"),
		"-e", filepath.Join(cl.out, part+".err")}, extra...)
	args = append(args, filepath.Join(cl.h.engine, "job.sh"), part)
	out, err := cl.slurm("sbatch", args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job id", out)
	}
	cl.jobs = append(cl.jobs, id)
	return id
}

// jobState is the job's state as squeue has it ("" once it left the
// queue) and, while pending, why.
func (cl *slurmCluster) jobState(id string) string {
	out, err := cl.slurm("squeue", "-h", "-j", id, "-o", "%T %r")
	if err != nil {
		if strings.Contains(err.Error(), "Invalid job id") {
			return ""
		}
		return "? (" + err.Error() + ")"
	}
	return strings.TrimSpace(out)
}

func (cl *slurmCluster) jobLogs(id string) string {
	var b strings.Builder
	ents, _ := os.ReadDir(cl.out)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".out") || strings.HasSuffix(e.Name(), ".err") {
			data, _ := os.ReadFile(filepath.Join(cl.out, e.Name()))
			fmt.Fprintf(&b, "---- %s ----\n%s\n", e.Name(), e2eTail(string(data), 3000))
		}
	}
	if out, err := cl.slurm("scontrol", "show", "job", id); err == nil {
		fmt.Fprintf(&b, "---- scontrol show job %s ----\n%s", id, out)
	}
	return b.String() + cl.daemonLogs()
}

// waitJSON waits for OUT/name (written by rename) while job id runs, and
// decodes it into v.
func (cl *slurmCluster) waitJSON(t *testing.T, id, name string, timeout time.Duration, v any) {
	t.Helper()
	path := filepath.Join(cl.out, name)
	deadline := time.Now().Add(timeout)
	gone := time.Time{}
	for {
		if data, err := os.ReadFile(path); err == nil {
			if err := json.Unmarshal(data, v); err != nil {
				t.Fatalf("%s: %v: %s", path, err, data)
			}
			return
		}
		st := cl.jobState(id)
		if st == "" && gone.IsZero() {
			gone = time.Now() // the file may still be on its way
		}
		if !gone.IsZero() && time.Since(gone) > e2eSurviveWait {
			t.Fatalf("job %s ended without writing %s\n%s", id, name, cl.jobLogs(id))
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s wrote no %s within %v (squeue: %q)\n%s", id, name, timeout, st, cl.jobLogs(id))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slurmResult is a result file of the driver.
type slurmResult struct {
	OK     bool           `json:"ok"`
	Errors []string       `json:"errors"`
	Facts  map[string]any `json:"facts"`
	Pids   []int          `json:"pids"`
}

func (r slurmResult) summary() string {
	b, _ := json.MarshalIndent(r.Facts, "  ", "  ")
	return fmt.Sprintf("ok=%v facts %s", r.OK, b)
}

func (cl *slurmCluster) waitResult(t *testing.T, id, name string, timeout time.Duration) slurmResult {
	t.Helper()
	var r slurmResult
	cl.waitJSON(t, id, name, timeout, &r)
	return r
}

func (cl *slurmCluster) waitJobGone(t *testing.T, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := cl.jobState(id)
		if st == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("job %s still in the queue %v after its driver was done: %s", id, timeout, st)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ps logs `tfgpu-kernel ps` of the jobs' state directory, as a table and
// as JSON.
func (cl *slurmCluster) ps(t *testing.T, when string) {
	t.Helper()
	for _, args := range [][]string{{"ps", "--state-dir", cl.state}, {"ps", "--json", "--state-dir", cl.state}} {
		c := exec.Command(cl.h.s.bin, args...)
		c.Env = cl.env
		out, err := cl.h.r.output(c)
		t.Logf("tfgpu-kernel %s (%s; exit %v):\n%s", strings.Join(args, " "), when, err, out)
	}
}

// ---------------------------------------------------------------- scancel

// slurmReady is what the driver reports once the scancel part is set up.
type slurmReady struct {
	Error          string              `json:"error"`
	Supervisor     int                 `json:"supervisor"`
	Kernel         int                 `json:"kernel"`
	Daemon         int                 `json:"daemon"`
	Stubborn       int                 `json:"stubborn"`
	Probe          int                 `json:"probe"`
	Driver         int                 `json:"driver"`
	Tree           []int               `json:"tree"`
	TreeDesc       []string            `json:"tree_desc"`
	KernelID       string              `json:"kernel_id"`
	ConnectionFile string              `json:"connection_file"`
	Log            string              `json:"log"`
	Cgroups        map[string][]string `json:"cgroups"`

	record slurmRecord
}

// slurmRecord is what the test reads of the supervisor's state file.
type slurmRecord struct {
	Containment  string `json:"containment"`
	Cgroup       string `json:"cgroup"`
	MemoryCgroup string `json:"memory_cgroup"`
	InnerDir     string `json:"inner_dir"`
	Phase        string `json:"phase"`
}

// slurmWatched is a process the test watches through the scancel.
type slurmWatched struct {
	role  string
	pid   int
	start string        // /proc starttime: a reused pid is not the process
	dead  time.Duration // first seen a zombie (or gone): when it died; -1 before
	gone  time.Duration // first seen gone (reaped): -1 before
}

func (w *slurmWatched) isGone() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.pid))
	if err != nil {
		return true
	}
	return slurmStartTime(b) != w.start
}

// poll notes, at now, whether the process died and whether it is gone.
func (w *slurmWatched) poll(now time.Duration) {
	if w.gone >= 0 {
		return
	}
	if w.isGone() {
		w.gone = now
		if w.dead < 0 {
			w.dead = now
		}
		return
	}
	if st, _, ok := testutil.ProcStat(w.pid); w.dead < 0 && ok && (st == 'Z' || st == 'X') {
		w.dead = now
	}
}

func slurmStartTime(stat []byte) string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22 of stat
}

// scancel cancels job id, whose driver reported ready, waits for the
// kernel's processes and cgroups to go (e2eSurviveWait at most) and checks
// they went; then it watches on (at most e2eSurviveWait + 5 s) until the
// rest is gone too, and logs when each thing went.
func (cl *slurmCluster) scancel(t *testing.T, id string, ready *slurmReady) {
	t.Helper()
	// What the job's processes are, before anything is signalled.
	var watched []*slurmWatched
	add := func(role string, pid int) {
		if pid <= 0 {
			return
		}
		for _, w := range watched {
			if w.pid == pid {
				return
			}
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Errorf("%s (pid %d) was already gone before the scancel", role, pid)
			return
		}
		watched = append(watched, &slurmWatched{role: role, pid: pid, start: slurmStartTime(b), dead: -1, gone: -1})
	}
	add("supervisor", ready.Supervisor)
	add("kernel", ready.Kernel)
	add("setsid'd daemon (the kernel's child)", ready.Daemon)
	add("SIGTERM-ignoring child of the kernel", ready.Stubborn)
	for i, p := range ready.Tree {
		// The driver's snapshot of the tree may hold a process that was
		// on its way out (the daemon's first fork, a helper the kernel
		// ran): one that ended by itself before the scancel is no leak.
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err != nil {
			desc := ""
			if i < len(ready.TreeDesc) {
				desc = ready.TreeDesc[i]
			}
			t.Logf("pid %d of the kernel's tree ended by itself before the scancel (the driver saw: %s)", p, desc)
			continue
		}
		add("the kernel's tree", p)
	}
	add("driver (the job script's child)", ready.Driver)
	_, shell, _ := testutil.ProcStat(ready.Driver)
	add("job script's shell", shell)
	_, stepd, _ := testutil.ProcStat(shell)
	add("slurmstepd", stepd)
	add("probe (the driver's SIGTERM-noting child)", ready.Probe)
	var stepdW, probeW *slurmWatched
	for _, w := range watched {
		switch w.pid {
		case stepd:
			stepdW = w
		case ready.Probe:
			probeW = w
		}
	}
	mustGo := map[int]bool{ready.Supervisor: true, ready.Kernel: true, ready.Daemon: true, ready.Stubborn: true}
	for _, p := range ready.Tree {
		mustGo[p] = true
	}

	// The job's Slurm cgroups, from the supervisor's /proc/PID/cgroup.
	cgLines, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ready.Supervisor))
	jobDirs := slurmJobDirs(string(cgLines), id)
	if cl.c.cgroups() && len(jobDirs) == 0 {
		t.Errorf("job %s: the supervisor is in no Slurm job cgroup under proctrack/cgroup:\n%s", id, cgLines)
	}
	// The supervisor's record, for its inner directory and cgroups.
	recordFile := filepath.Join(cl.state, ready.KernelID+".json")
	if data, err := os.ReadFile(recordFile); err != nil {
		t.Errorf("no record of the running kernel in TFGPU_STATE_DIR: %v", err)
	} else if err := json.Unmarshal(data, &ready.record); err != nil {
		t.Errorf("%s: %v", recordFile, err)
	}
	tfBefore := slurmCgroupsOf([]string{ready.KernelID})
	t.Logf("before scancel %s: containment %s, record %+v\n  the supervisor's cgroups:\n    %s\n  the job's Slurm cgroups: %s\n  the kernel's tfgpu cgroups: %s\n  processes:\n    %s",
		id, ready.record.Containment, ready.record, strings.Join(strings.Fields(string(cgLines)), "\n    "),
		strings.Join(jobDirs, ", "), strings.Join(tfBefore, ", "), strings.Join(slurmDescribeAll(watched), "\n    "))

	probeTerm := filepath.Join(cl.out, "probe-term")
	began := time.Now()
	if _, err := cl.slurm("scancel", id); err != nil {
		t.Fatalf("%v", err)
	}
	returned := time.Now()
	t.Logf("scancel %s returned after %v", id, returned.Sub(began).Round(time.Microsecond))

	// Watch: the processes every 2 ms, the job's cgroups as often (a
	// stat each), the kernel's tfgpu-* cgroups every 50 ms (a walk of
	// /sys/fs/cgroup); squeue, an exec, on a goroutine of its own.
	var jobLeftNs atomic.Int64
	jobLeftNs.Store(-1)
	stopQueue := make(chan struct{})
	queueDone := make(chan struct{})
	go func() {
		defer close(queueDone)
		for {
			if cl.jobState(id) == "" {
				jobLeftNs.Store(int64(time.Since(returned)))
				return
			}
			select {
			case <-stopQueue:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	cgGone := map[string]time.Duration{}
	var tfGone time.Duration = -1
	tfChecked := time.Now() // the first walk 50 ms in: not while the kill is timed
	var checked bool
	for {
		now := time.Since(returned)
		all := true    // everything watched, the probe and slurmstepd too
		kernel := true // what must go: the kernel's processes and cgroups
		for _, w := range watched {
			w.poll(now)
			all = all && w.gone >= 0
			kernel = kernel && (w.gone >= 0 || !mustGo[w.pid])
		}
		for _, d := range jobDirs {
			if _, ok := cgGone[d]; !ok {
				if _, err := os.Stat(d); err != nil {
					cgGone[d] = now
				}
			}
		}
		all = all && len(cgGone) == len(jobDirs)
		kernel = kernel && len(cgGone) == len(jobDirs)
		if tfGone < 0 && time.Since(tfChecked) >= 50*time.Millisecond {
			tfChecked = time.Now()
			if len(slurmCgroupsOf([]string{ready.KernelID})) == 0 {
				tfGone = now
			}
		}
		all = all && tfGone >= 0
		kernel = kernel && tfGone >= 0
		if !checked && (now >= e2eSurviveWait || kernel) {
			checked = true
			t.Logf("scancel %s: the kernel's processes and cgroups gone: %v, %v after it returned", id, kernel, now.Round(time.Millisecond))
			cl.checkAfterScancel(t, id, watched, mustGo, jobDirs, cgGone, ready)
		}
		left := jobLeftNs.Load() >= 0
		// Once slurmstepd is gone Slurm kills nothing more: what lives
		// on then (the probe under proctrack/linuxproc) is left for good.
		if (all && left) || (checked && left && stepdW != nil && stepdW.gone >= 0 && now-stepdW.gone > 300*time.Millisecond) ||
			now > e2eSurviveWait+5*time.Second {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stopQueue)
	<-queueDone
	jobLeft := time.Duration(jobLeftNs.Load())

	// The timeline, for docs/operating.md.
	var lines []string
	if data, err := os.ReadFile(probeTerm); err == nil {
		for _, l := range strings.Fields(string(data)) {
			if f, err := strconv.ParseFloat(l, 64); err == nil {
				at := time.Unix(0, int64(f*1e9)).Sub(returned)
				lines = append(lines, fmt.Sprintf("%+8.1f ms  SIGTERM reached the probe", float64(at.Microseconds())/1000))
			}
		}
	} else {
		lines = append(lines, "           the probe never noted a SIGTERM (killed before its handler ran)")
	}
	for _, e := range cl.slurmdSignals(id) {
		lines = append(lines, fmt.Sprintf("%+8.1f ms  slurmd's log: %s", float64(e.at.Sub(returned).Microseconds())/1000, e.what))
	}
	for _, w := range watched {
		if w.dead >= 0 && w.dead < w.gone {
			lines = append(lines, fmt.Sprintf("%+8.1f ms  dead (a zombie): %s (pid %d)", float64(w.dead.Microseconds())/1000, w.role, w.pid))
		}
		if w.gone >= 0 {
			lines = append(lines, fmt.Sprintf("%+8.1f ms  gone (reaped): %s (pid %d)", float64(w.gone.Microseconds())/1000, w.role, w.pid))
		} else {
			lines = append(lines, fmt.Sprintf("   never    left: %s: %s", w.role, strings.Join(slurmDescribe([]int{w.pid}), "")))
		}
	}
	for _, d := range jobDirs {
		if g, ok := cgGone[d]; ok {
			lines = append(lines, fmt.Sprintf("%+8.1f ms  removed: %s", float64(g.Microseconds())/1000, d))
		} else {
			lines = append(lines, fmt.Sprintf("   never    left: %s", slurmCgroupDesc(d)))
		}
	}
	if tfGone >= 0 && len(tfBefore) > 0 {
		lines = append(lines, fmt.Sprintf("%+8.1f ms  no tfgpu-* cgroup of the kernel left (there were %s)", float64(tfGone.Microseconds())/1000, strings.Join(tfBefore, ", ")))
	} else if tfGone < 0 {
		for _, d := range slurmCgroupsOf([]string{ready.KernelID}) {
			lines = append(lines, fmt.Sprintf("   never    left: %s", slurmCgroupDesc(d)))
		}
	}
	if jobLeft >= 0 {
		lines = append(lines, fmt.Sprintf("%+8.1f ms  job %s left squeue", float64(jobLeft.Microseconds())/1000, id))
	} else {
		lines = append(lines, fmt.Sprintf("   never    job %s still in squeue: %s", id, cl.jobState(id)))
	}
	sort.SliceStable(lines, func(i, j int) bool { return slurmLineAt(lines[i]) < slurmLineAt(lines[j]) })
	t.Logf("after scancel %s (times from scancel's return; watched until %v):\n  %s\n  slurmd's log of the job:\n    %s", id,
		time.Since(returned).Round(time.Millisecond), strings.Join(lines, "\n  "), strings.Join(cl.slurmdJobLines(id), "\n    "))
	if log, err := os.ReadFile(ready.Log); err == nil {
		t.Logf("the end of the supervisor's log (%s):\n%s", ready.Log, e2eTail(string(log), 2500))
	}
	// The probe is the test's instrument, not the kernel's: where Slurm
	// never SIGKILLs it (proctrack/linuxproc loses a process once it is
	// orphaned), it is said and ended here.
	if probeW != nil && probeW.gone < 0 {
		t.Logf("the probe (pid %d), which only noted SIGTERM, outlived job %s: Slurm never SIGKILLed it (%s); killed now",
			probeW.pid, id, strings.Join(slurmDescribe([]int{probeW.pid}), ""))
		syscall.Kill(probeW.pid, syscall.SIGKILL)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !probeW.isGone(); {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func slurmLineAt(l string) float64 {
	f := strings.Fields(l)
	if len(f) > 0 {
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			return v
		}
	}
	return 1e12
}

// checkAfterScancel fails what is not gone once the test stopped waiting
// for it (e2eSurviveWait after scancel returned, well under KillWait).
func (cl *slurmCluster) checkAfterScancel(t *testing.T, id string, watched []*slurmWatched, mustGo map[int]bool, jobDirs []string, cgGone map[string]time.Duration, ready *slurmReady) {
	t.Helper()
	var left []string
	for _, w := range watched {
		if w.gone < 0 && mustGo[w.pid] {
			left = append(left, w.role+": "+strings.Join(slurmDescribe([]int{w.pid}), ""))
		}
	}
	if len(left) > 0 {
		t.Errorf("%v after scancel %s returned, processes of the kernel are not gone:\n  %s", e2eSurviveWait, id, strings.Join(left, "\n  "))
	}
	var cgs []string
	for _, d := range jobDirs {
		if _, ok := cgGone[d]; !ok {
			cgs = append(cgs, slurmCgroupDesc(d))
		}
	}
	if len(cgs) > 0 {
		t.Errorf("%v after scancel %s returned, the job's Slurm cgroups are not removed:\n  %s", e2eSurviveWait, id, strings.Join(cgs, "\n  "))
	}
	if tf := slurmCgroupsOf([]string{ready.KernelID}); len(tf) > 0 {
		var d []string
		for _, p := range tf {
			d = append(d, slurmCgroupDesc(p))
		}
		t.Errorf("%v after scancel %s returned, tfgpu-* cgroups of the kernel are left:\n  %s", e2eSurviveWait, id, strings.Join(d, "\n  "))
	}
	if other := slurmNewTfgpuCgroups(cl.h.baseline, cl.kernelIDs); len(other) > 0 {
		t.Logf("other tfgpu-* cgroups made since the test started (not this kernel's: another test on this host?): %s", strings.Join(other, ", "))
	}
}

// slurmdEvent is a line of slurmd's log with its time.
type slurmdEvent struct {
	at   time.Time
	what string
}

// slurmdSignals is what slurmd logged of the signals it sent job id's
// batch step and of the step's end, with the log's times (local, in ms).
func (cl *slurmCluster) slurmdSignals(id string) []slurmdEvent {
	var out []slurmdEvent
	re := regexp.MustCompile(`^\[([0-9T:.-]+)\] \[` + id + `\.batch\] (Sent signal \d+ .*|task \d+ \(\d+\) exited.*|done with job|.*Unable to destroy.*|.*giving up.*)$`)
	data, _ := os.ReadFile(filepath.Join(cl.dir, "log", "slurmd.log"))
	for _, l := range strings.Split(string(data), "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
		if err == nil {
			out = append(out, slurmdEvent{at, m[2]})
		}
	}
	return out
}

// slurmdJobLines is what slurmd logged about job id's kill and end.
func (cl *slurmCluster) slurmdJobLines(id string) []string {
	data, _ := os.ReadFile(filepath.Join(cl.dir, "log", "slurmd.log"))
	var out []string
	re := regexp.MustCompile(`\[` + id + `\.batch\]|JobId=` + id + `\b|job ` + id + `\b`)
	keep := regexp.MustCompile(`signal|[Kk]ill|exited|completed|CANCELLED|done with job|terminate|destroy|rmdir|unable|error|oom`)
	for _, l := range strings.Split(string(data), "\n") {
		if re.MatchString(l) && keep.MatchString(l) {
			out = append(out, l)
		}
	}
	if len(out) > 40 {
		out = append(out[:20], append([]string{"…"}, out[len(out)-20:]...)...)
	}
	return out
}

// ---------------------------------------------------------------- the end

// checkNothingLeft fails on anything of the configuration's jobs still
// there once they all ended: a process that carries the jobs' tag (every
// process of a job inherits it), a job cgroup of Slurm's, a tfgpu-* cgroup
// of a kernel.
func (cl *slurmCluster) checkNothingLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		procs := e2eAlive(cl.tag, nil)
		jobs := slurmJobCgroups(cl.jobs)
		tf := slurmCgroupsOf(cl.kernelIDs)
		if len(procs)+len(jobs)+len(tf) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if len(procs) > 0 {
				t.Errorf("processes of the jobs alive after every job ended (killed in cleanup):\n  %s", strings.Join(e2eDescribe(procs), "\n  "))
			}
			if len(jobs) > 0 {
				t.Errorf("Slurm job cgroups left after every job ended (removed in cleanup): %s", strings.Join(jobs, ", "))
			}
			if len(tf) > 0 {
				t.Errorf("tfgpu-* cgroups of the jobs' kernels left after every job ended (removed in cleanup): %s", strings.Join(tf, ", "))
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endJobs cancels what still runs, then kills whatever carries the jobs'
// tag, slurmd's slurmstepds and what is in the job cgroups or the kernels'
// cgroups, each by its pid.
func (cl *slurmCluster) endJobs(t *testing.T) {
	if out, _ := cl.slurm("squeue", "-h", "-o", "%i"); strings.TrimSpace(out) != "" {
		cl.slurm("scancel", strings.Fields(out)...)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if out, err := cl.slurm("squeue", "-h", "-o", "%i"); err != nil || strings.TrimSpace(out) == "" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	dirs := append(slurmJobCgroups(cl.jobs), slurmCgroupsOf(cl.kernelIDs)...)
	for round := 0; round < 20; round++ {
		pids := append(e2eAlive(cl.tag, nil), cl.stepds()...)
		for _, d := range dirs {
			slurmThaw(d)
			pids = append(pids, slurmProcsIn(d)...)
		}
		if len(pids) == 0 {
			return
		}
		if round == 0 {
			t.Logf("cleanup: killing what the jobs left:\n  %s", strings.Join(e2eDescribe(pids), "\n  "))
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("cleanup: processes of the jobs survive SIGKILL")
}

// stepds lists slurmd's slurmstepds: they carry the daemons' tag (not
// slurmctld's slurmscriptd, which slurmctld ends), or, double-forked by
// slurmd, were re-parented to this process, the subreaper.
func (cl *slurmCluster) stepds() []int {
	tagged := map[int]bool{}
	for _, p := range slurmTagged("E2E_SLURM_DAEMON="+cl.tag, cl.h.r.ownPids()) {
		tagged[p] = true
	}
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		if strings.TrimSpace(string(comm)) != "slurmstepd" {
			continue
		}
		if st, ppid, ok := testutil.ProcStat(p); ok && st != 'Z' && (tagged[p] || ppid == os.Getpid()) {
			out = append(out, p)
		}
	}
	return out
}

// removeCgroups removes every cgroup directory made since the test began
// in Slurm's subtrees (/sys/fs/cgroup/*/slurm*) and every tfgpu-* cgroup
// of the jobs' kernels, deepest first, and fails on any it cannot.
func (cl *slurmCluster) removeCgroups(t *testing.T) {
	var dirs []string
	for d := range slurmCgroupDirs() {
		if cl.h.baseline[d] {
			continue
		}
		if slurmInSlurm(d) || slurmKernelCgroup(filepath.Base(d), cl.kernelIDs) {
			dirs = append(dirs, d)
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	var failed []string
	for _, d := range dirs {
		var err error
		for i := 0; i < 40; i++ {
			slurmThaw(d)
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			for _, p := range slurmProcsIn(d) { // ours: in our cluster's or kernels' cgroup
				syscall.Kill(p, syscall.SIGKILL)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", d, err))
		}
	}
	if len(dirs) > 0 {
		t.Logf("cleanup: removed %d cgroup directories made by Slurm or the kernels", len(dirs)-len(failed))
	}
	if len(failed) > 0 {
		t.Errorf("cleanup: cannot remove cgroups:\n  %s", strings.Join(failed, "\n  "))
	}
}

// ---------------------------------------------------------------- cgroups

// slurmCgroupMounts maps each cgroup hierarchy, named as /proc/PID/cgroup
// names it ("memory", "cpu,cpuacct", "name=systemd"; "" for cgroup2), to
// its mount point in this mount namespace.
func slurmCgroupMounts() map[string]string {
	out := map[string]string{}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch qf[0] {
		case "cgroup2":
			out[""] = pf[4]
		case "cgroup":
			var names []string
			for _, o := range strings.Split(qf[2], ",") {
				switch {
				case strings.HasPrefix(o, "name="):
					names = append(names, o)
				case slurmKnownController[o]:
					names = append(names, o)
				}
			}
			sort.Strings(names)
			out[strings.Join(names, ",")] = pf[4]
		}
	}
	return out
}

var slurmKnownController = map[string]bool{"cpu": true, "cpuacct": true, "cpuset": true, "memory": true, "devices": true,
	"freezer": true, "net_cls": true, "net_prio": true, "blkio": true, "perf_event": true, "hugetlb": true, "pids": true, "rdma": true, "misc": true}

func slurmIsV1(ctrl string) bool {
	for k := range slurmCgroupMounts() {
		for _, c := range strings.Split(k, ",") {
			if c == ctrl {
				return true
			}
		}
	}
	return false
}

func slurmIsV2(path string) bool { return slurmCgroupMounts()[""] == path }

// slurmJobDirs are the job cgroup directories (…/job_ID) of the
// hierarchies a /proc/PID/cgroup text names.
func slurmJobDirs(cgroupFile, id string) []string {
	mounts := slurmCgroupMounts()
	var dirs []string
	for _, l := range strings.Split(strings.TrimSpace(cgroupFile), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		names := strings.Split(f[1], ",")
		sort.Strings(names)
		mnt, ok := mounts[strings.Join(names, ",")]
		if !ok {
			continue
		}
		i := strings.Index(f[2]+"/", "/job_"+id+"/")
		if i < 0 {
			continue
		}
		dirs = append(dirs, filepath.Join(mnt, f[2][:i+len("/job_"+id)]))
	}
	return dirs
}

// slurmCgroupDirs is every directory in every cgroup hierarchy mounted
// under /sys/fs/cgroup, down to 8 levels.
func slurmCgroupDirs() map[string]bool {
	out := map[string]bool{}
	for _, mnt := range slurmCgroupMounts() {
		if !strings.HasPrefix(mnt, "/sys/fs/cgroup") {
			continue
		}
		base := strings.Count(mnt, "/")
		filepath.WalkDir(mnt, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Count(p, "/")-base > 8 {
				return filepath.SkipDir
			}
			if p != mnt {
				out[p] = true
			}
			return nil
		})
	}
	return out
}

// slurmInSlurm reports whether d is in a Slurm subtree (slurm, or
// slurm_NODE where Slurm is built for several slurmd).
func slurmInSlurm(d string) bool {
	for _, part := range strings.Split(d, "/") {
		if part == "slurm" || strings.HasPrefix(part, "slurm_") {
			return true
		}
	}
	return false
}

// slurmKernelCgroup reports whether base names a cgroup of one of the
// kernels: tfgpu-<kernel id>-<supervisor pid> (wrapper.cgroupName) or any
// other tfgpu-* name carrying the id.
func slurmKernelCgroup(base string, ids []string) bool {
	if !strings.HasPrefix(base, "tfgpu-") {
		return false
	}
	for _, id := range ids {
		if id != "" && strings.Contains(base, id) {
			return true
		}
	}
	return false
}

// slurmCgroupsOf lists the tfgpu-* cgroup directories, in any hierarchy,
// of the kernels ids, and every tfgpu-* directory inside a Slurm subtree.
func slurmCgroupsOf(ids []string) []string {
	var out []string
	for d := range slurmCgroupDirs() {
		base := filepath.Base(d)
		if slurmKernelCgroup(base, ids) || (strings.HasPrefix(base, "tfgpu-") && slurmInSlurm(d)) {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// slurmNewTfgpuCgroups lists tfgpu-* directories that were not there when
// the test began, but those of the kernels ids and those in a Slurm
// subtree (slurmCgroupsOf has them).
func slurmNewTfgpuCgroups(baseline map[string]bool, ids []string) []string {
	var out []string
	for d := range slurmCgroupDirs() {
		base := filepath.Base(d)
		if strings.HasPrefix(base, "tfgpu-") && !baseline[d] && !slurmKernelCgroup(base, ids) && !slurmInSlurm(d) {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// slurmJobCgroups lists the job_ID directories of the jobs in any
// hierarchy.
func slurmJobCgroups(jobs []string) []string {
	want := map[string]bool{}
	for _, j := range jobs {
		want["job_"+j] = true
	}
	var out []string
	for d := range slurmCgroupDirs() {
		if want[filepath.Base(d)] && slurmInSlurm(d) {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// slurmProcsIn lists the processes in cgroup directory d and below.
func slurmProcsIn(d string) []int {
	var pids []int
	filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

// slurmThaw thaws a v1 freezer cgroup and those below it: a frozen
// process does not act on SIGKILL.
func slurmThaw(d string) {
	filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			if st, err := os.ReadFile(filepath.Join(p, "freezer.state")); err == nil && strings.TrimSpace(string(st)) != "THAWED" {
				os.WriteFile(filepath.Join(p, "freezer.state"), []byte("THAWED"), 0)
			}
		}
		return nil
	})
}

// slurmCgroupDesc says what is in cgroup directory d: its processes and
// subdirectories.
func slurmCgroupDesc(d string) string {
	var subs []string
	ents, _ := os.ReadDir(d)
	for _, e := range ents {
		if e.IsDir() {
			subs = append(subs, e.Name())
		}
	}
	procs := slurmProcsIn(d)
	desc := fmt.Sprintf("%s (subdirectories %v; processes in it and below: %d", d, subs, len(procs))
	if st, err := os.ReadFile(filepath.Join(d, "freezer.state")); err == nil {
		desc += ", freezer " + strings.TrimSpace(string(st))
	}
	desc += ")"
	if len(procs) > 0 {
		desc += "\n      " + strings.Join(slurmDescribe(procs), "\n      ")
	}
	return desc
}

// ---------------------------------------------------------------- processes

// slurmDescribe is e2eDescribe with each process's cgroups (freezer,
// memory, cgroup2).
func slurmDescribe(pids []int) []string {
	out := e2eDescribe(pids)
	for i, p := range pids {
		if i >= len(out) {
			break
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p))
		if err != nil {
			out[i] = fmt.Sprintf("pid %d: gone", p)
			continue
		}
		var cg []string
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.SplitN(l, ":", 3)
			if len(f) == 3 && (f[1] == "" || f[1] == "freezer" || f[1] == "memory") {
				name := f[1]
				if name == "" {
					name = "cgroup2"
				}
				cg = append(cg, name+":"+f[2])
			}
		}
		out[i] += " [" + strings.Join(cg, " ") + "]"
	}
	return out
}

func slurmDescribeAll(ws []*slurmWatched) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.role+": "+strings.Join(slurmDescribe([]int{w.pid}), ""))
	}
	return out
}

// slurmTagged lists the live processes whose environment holds kv, but
// for the pids in except.
func slurmTagged(kv string, except map[int]bool) []int {
	var out []int
	for _, p := range e2eWithEnv(kv) {
		if !except[p] {
			out = append(out, p)
		}
	}
	return out
}

// slurmNamesWith lists the entries of dir whose name holds s, but for
// except.
func slurmNamesWith(dir, s, except string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), s) && e.Name() != except {
			out = append(out, e.Name())
		}
	}
	return out
}

// ---------------------------------------------------------------- reaper

// slurmReaper waits for the children of the test process that are not its
// own commands: this process is a child subreaper (e2eBuild), so
// slurmstepd (double-forked by slurmd) and every orphan of a job — a
// supervisor whose driver died, a kernel whose supervisor died — are
// reparented here and would stay zombies, where a host's init reaps them.
// Commands started elsewhere (testutil's useradd and id, say) are
// safe too: e2eReapOrphans leaves a child this process started to its own
// Wait. Daemons the test runs are started through start, which records
// their pid (ownPids) so that leftovers checks tell them from a job's.
type slurmReaper struct {
	mu   sync.Mutex
	own  map[int]bool
	stop chan struct{}
	done chan struct{}
}

func newSlurmReaper(t *testing.T) *slurmReaper {
	r := &slurmReaper{own: map[int]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			r.reap()
			select {
			case <-r.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(r.stop)
		<-r.done
		e2eReapOrphans()
	})
	return r
}

func (r *slurmReaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	e2eReapOrphans()
}

func (r *slurmReaper) start(c *exec.Cmd) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := c.Start(); err != nil {
		return err
	}
	r.own[c.Process.Pid] = true
	return nil
}

func (r *slurmReaper) wait(c *exec.Cmd) error {
	err := c.Wait()
	r.mu.Lock()
	delete(r.own, c.Process.Pid)
	r.mu.Unlock()
	return err
}

func (r *slurmReaper) output(c *exec.Cmd) ([]byte, error) {
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	if err := r.start(c); err != nil {
		return nil, err
	}
	err := r.wait(c)
	return b.Bytes(), err
}

func (r *slurmReaper) ownPids() map[int]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[int]bool{}
	for p := range r.own {
		m[p] = true
	}
	return m
}

// stopDaemon ends a daemon the test started: SIGTERM, then SIGKILL after
// 5 s, and waits for it.
func (r *slurmReaper) stopDaemon(t *testing.T, name string, c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	if c.ProcessState == nil {
		c.Process.Signal(syscall.SIGTERM)
	}
	done := make(chan error, 1)
	go func() { done <- r.wait(c) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Logf("%s (pid %d) did not exit 5 s after SIGTERM: SIGKILL", name, c.Process.Pid)
		c.Process.Kill()
		<-done
	}
}
