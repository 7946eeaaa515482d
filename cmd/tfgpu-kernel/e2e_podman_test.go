//go:build linux && e2e

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// TestE2EPodman (issue 24, deliverable 4: a real container engine) runs the
// kernel in real podman containers, under both OCI runtimes Debian ships
// (crun, runc), one subtest per runtime and variant:
//
//   - default: `podman run --init` (catatonit is PID 1 and reaps);
//   - memory: --init --memory 1g: a cell touching 1.5 GB is killed, and its
//     stderr names the container's memory limit of 1 GiB; with
//     TFGPU_MEMORY_LIMIT=300M, which cannot be applied, the first cell is
//     told so and that the container's 1 GiB holds the kernel;
//   - readonly-cgroups: podman's default cgroup mounts, which for an
//     unprivileged container on a cgroup v1 (hybrid) host with cgroupfs are:
//     /sys/fs/cgroup a tmpfs, each v1 hierarchy bind-mounted read-only at
//     the container's own cgroup (cgroupns=host: /proc/self/cgroup still
//     shows /libpod_parent/libpod-<id>), no cgroup2 at all; the driver
//     checks they are all "ro". With TFGPU_MEMORY_LIMIT=300M the supervisor
//     cannot apply its own limit, and the first cell must say so;
//   - privileged: --privileged, the same mounts read-write: the
//     supervisor's own cgroups are made inside the container's;
//   - no-init: no --init: the driver itself is PID 1 and never reaps an
//     orphan; after a start, a restart and a shutdown no zombie may be left.
//
// Then rootless (issue 36), subtests rootless-crun and rootless-runc: the
// same, with podman run by an ordinary user made for the test with
// useradd (subordinate ids, /run/user/UID, the image copied into their
// store with podman save and load; podmanEnv.rootless), variants
// podmanRootlessVariants: the kernel's containment must be proc, the
// restart must leave none of its escaping children, podman stop and kill
// none of the container's processes and no zombie (host pids); on cgroup
// v1 the container has no cgroup of its own, and stock runs Debian's
// python3 kernelspec in the same setup, for comparison (its survivors of
// the restart are logged).
//
// The image is Debian 12 built with debootstrap from Debian's packages
// (testdata/engines/image.sh; no registry), cached in podman's store under
// a tag that is a hash of the script. The binary the suite built is
// bind-mounted read-only; the driver, testdata/engines/podman_driver.py,
// installs the kernelspec inside with `install --prefix` and drives the
// kernel with jupyter_client (restart with a setsid'd, SIGTERM-ignoring
// daemon; the variant's check), then starts the children again and says
// it is ready. The test then stops the container from the host, with
// `podman stop -t 2` or `podman kill` (alternating, so that each variant
// has both across the runtimes: podmanKills), and asserts after its
// return (waiting for it, the time logged; e2eSurviveWait): no process the container had alive (host pids, from its
// cgroups and its init's descendants), the container's cgroups removed in
// every hierarchy, and no tfgpu-* cgroup of its kernels anywhere.
//
// Host quirks handled here (docs/operating.md#rootless-podman says what an
// operator needs of the first; the rest are this host's):
//   - crun refuses a hybrid host whose cgroup2 mount has a controller
//     ("cgroups in hybrid mode not supported, drop all controllers from
//     cgroupv2"): every podman command runs in one private mount namespace
//     where /sys/fs/cgroup/unified/cgroup.controllers is an empty file
//     (runc does not need it; it is harmless there);
//   - without CAP_SYS_RESOURCE (a sandbox's bounding set) podman cannot
//     raise RLIMIT_NOFILE/NPROC to its defaults for root ("error setting
//     rlimit type 7: operation not permitted"): --ulimit at most the
//     current hard limits (podmanUlimits);
//   - no systemd: --cgroup-manager cgroupfs --events-backend file.
func TestE2EPodman(t *testing.T) {
	s := e2eSetup(t)
	if !s.wrapped {
		t.Skip("containment in a container is the supervisor's")
	}
	e := podmanSetup(t)
	for ri, rt := range []string{"crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			e.probe(t, rt)
			for vi, v := range podmanVariants {
				t.Run(v.name, func(t *testing.T) {
					e.variant(t, s, rt, v, podmanKills(ri, vi))
				})
			}
		})
	}
	rl := e.rootless(t, s)
	for ri, rt := range []string{"crun", "runc"} {
		t.Run("rootless-"+rt, func(t *testing.T) {
			rl.probe(t, rt)
			for vi, v := range podmanRootlessVariants {
				t.Run(v.name, func(t *testing.T) {
					rl.variant(t, s, rt, v, podmanKills(ri, vi))
				})
			}
		})
	}
}

// podmanKills: podman kill instead of podman stop -t 2 for half the runs:
// crun kills memory and privileged, runc default, readonly-cgroups and
// no-init.
func podmanKills(runtimeIndex, variantIndex int) bool { return (runtimeIndex+variantIndex)%2 == 1 }

var podmanVariants = []podmanVariant{
	{name: "default", args: []string{"--init"}},
	{name: "memory", args: []string{"--init", "--memory", "1g"}, env: []string{"TFGPU_MEMORY_LIMIT=300M"}},
	{name: "readonly-cgroups", args: []string{"--init"}},
	{name: "privileged", args: []string{"--init", "--privileged"}},
	{name: "no-init"},
}

// podmanRootlessVariants run as the rootless user (podmanEnv.rootless).
// On cgroup v1 a rootless container has no cgroup of its own and podman
// ignores its resource options ("Resource limits are not supported and
// ignored on cgroups V1 rootless systems"): memory gives it --memory 1g
// anyway, and TFGPU_MEMORY_LIMIT=300M, and the first cell must say that
// no memory limit applies. stock is Debian's python3 kernelspec in the
// same container, for comparison: what happens to its escaping children
// on restart is logged, not asserted.
var podmanRootlessVariants = []podmanVariant{
	{name: "default", args: []string{"--init"}},
	{name: "memory", args: []string{"--init", "--memory", "1g"}, driver: "rootless-memory", env: []string{"TFGPU_MEMORY_LIMIT=300M"}},
	{name: "no-init"},
	{name: "stock", args: []string{"--init"}, stock: true},
}

type podmanVariant struct {
	name   string
	args   []string // podman run's
	driver string   // podman_driver.py's variant: name when empty
	env    []string // podman run -e's, more
	stock  bool     // Debian's stock python3 kernelspec, not tfgpu: compared, not asserted
}

const (
	podmanImageRepo = "localhost/tfgpu-engine"
	podmanHybridCtl = "/sys/fs/cgroup/unified/cgroup.controllers"
	podmanReadyWait = 180 * time.Second
	podmanLabel     = "tfgpu-e2e-podman" // on every container of the test: the test binary's pid
)

// podmanEnv is the engine as the test uses it: the mount namespace every
// podman command runs in and the image.
type podmanEnv struct {
	ns      int    // pid of the process holding the mount namespace
	masked  bool   // podmanHybridCtl reads as empty there
	image   string // localhost/tfgpu-engine:<key>
	ulimits []string
	user    *podmanUser // rootless: podman runs as this user; nil: as root
}

// podmanSetup checks for (or, as root, installs) podman, both runtimes and
// debootstrap, makes the mount namespace and builds or reuses the image.
func podmanSetup(t *testing.T) *podmanEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root: rootful podman, --privileged containers, and the host's view of the container's pids and cgroups")
	}
	for _, tool := range []string{"unshare", "nsenter", "mount"} {
		e2eRequireTool(t, tool)
	}
	if missing := podmanMissing(); len(missing) > 0 {
		t.Logf("missing %v: apt-get install -y podman crun runc debootstrap uidmap", missing)
		install := func() ([]byte, error) {
			c := exec.Command("apt-get", "install", "-y", "podman", "crun", "runc", "debootstrap", "uidmap")
			c.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			return c.CombinedOutput()
		}
		out, err := install()
		if err != nil { // stale package lists
			exec.Command("apt-get", "update").Run()
			out, err = install()
		}
		if missing = podmanMissing(); err != nil || len(missing) > 0 {
			testutil.RequireOrSkip(t, "need podman, crun, runc, debootstrap and uidmap (apt-get install -y podman crun runc debootstrap uidmap); missing %v: %v\n%s",
				missing, err, e2eTail(string(out), 2000))
		}
	}
	e := &podmanEnv{ulimits: podmanUlimits()}
	e.startNamespace(t)
	e.removeStale(t)
	e.image = e.buildImage(t)
	return e
}

// removeStale removes the containers of earlier test binaries that are
// gone (killed by -timeout, say, before their cleanups ran).
func (e *podmanEnv) removeStale(t *testing.T) {
	out, err := e.run(time.Minute, "ps", "-a", "--filter", "label="+podmanLabel,
		"--format", `{{.Names}} {{index .Labels "`+podmanLabel+`"}}`)
	if err != nil {
		t.Logf("podman ps: %v %s", err, out)
		return
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		if pid, err := strconv.Atoi(f[1]); err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			o, err := e.run(time.Minute, "rm", "-f", "-t", "0", f[0])
			t.Logf("removed the container %s of an earlier test run (pid %d, gone): %v %s", f[0], pid, err, o)
		}
	}
}

// podmanMissing are the programs the test needs that are not installed
// (conmon and catatonit, podman's --init, come with Debian's podman;
// newuidmap and newgidmap, for rootless podman's user namespace, with
// uidmap, which podman only recommends).
func podmanMissing() []string {
	var missing []string
	for _, tool := range []string{"podman", "crun", "runc", "debootstrap", "conmon", "catatonit", "newuidmap", "newgidmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat("/usr/libexec/podman/" + tool); err != nil {
				missing = append(missing, tool)
			}
		}
	}
	return missing
}

// podmanUlimits: nofile and nproc 4096, or the current hard limit when lower.
func podmanUlimits() []string {
	var out []string
	for _, l := range []struct {
		name string
		res  int
	}{{"nofile", syscall.RLIMIT_NOFILE}, {"nproc", 6 /* RLIMIT_NPROC */}} {
		n := uint64(4096)
		var r syscall.Rlimit
		if syscall.Getrlimit(l.res, &r) == nil && r.Max < n {
			n = r.Max
		}
		out = append(out, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, n, n))
	}
	return out
}

// startNamespace starts the process whose private mount namespace every
// podman command of the test joins (nsenter), with the hybrid host's
// cgroup2 controllers masked for crun. It lives while its stdin is open.
func (e *podmanEnv) startNamespace(t *testing.T) {
	t.Helper()
	ctl, err := os.ReadFile(podmanHybridCtl)
	e.masked = err == nil && len(bytes.TrimSpace(ctl)) > 0
	empty := filepath.Join(t.TempDir(), "cgroup.controllers")
	testutil.NoErr(t, os.WriteFile(empty, nil, 0o444))
	script := `set -e
if [ "$2" = 1 ]; then mount --bind "$1" ` + podmanHybridCtl + `; fi
echo ready
exec cat >/dev/null`
	masked := map[bool]string{true: "1", false: "0"}[e.masked]
	c := exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", empty, masked)
	stdin, err := c.StdinPipe()
	testutil.NoErr(t, err)
	var stderr testutil.Buffer
	c.Stderr = &stderr
	stdout, err := c.StdoutPipe()
	testutil.NoErr(t, err)
	if err := c.Start(); err != nil {
		t.Fatalf("unshare --mount: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.Process.Kill()
			<-done
		}
	})
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("the mount namespace for podman (masking %s): %q %s", podmanHybridCtl, line, stderr.String())
	}
	e.ns = c.Process.Pid
	if e.masked {
		t.Logf("hybrid host: %s (%q) reads as empty in podman's mount namespace, for crun", podmanHybridCtl, strings.TrimSpace(string(ctl)))
	}
}

// podman is a podman command in the test's mount namespace, as root or,
// rootless, as e.user (podmanUser.argv).
func (e *podmanEnv) podman(ctx context.Context, args ...string) *exec.Cmd {
	argv := []string{"--mount=/proc/" + strconv.Itoa(e.ns) + "/ns/mnt", "--"}
	if e.user != nil {
		argv = append(argv, e.user.argv()...)
	}
	argv = append(append(argv, "podman", "--cgroup-manager", "cgroupfs", "--events-backend", "file"), args...)
	c := exec.CommandContext(ctx, "nsenter", argv...)
	if e.user != nil {
		c.Dir = e.user.home
	}
	return c
}

// run runs a podman command and returns its combined output.
func (e *podmanEnv) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := e.podman(ctx, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// buildImage returns the image's tag, building it with image.sh unless
// podman's store has it; other tags of the repository are removed.
func (e *podmanEnv) buildImage(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "engines", "image.sh"))
	testutil.NoErr(t, err)
	data, err := os.ReadFile(script)
	testutil.NoErr(t, err)
	sum := sha256.Sum256(data)
	tag := podmanImageRepo + ":" + hex.EncodeToString(sum[:])[:12]
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "tfgpu-engine-image.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	testutil.NoErr(t, err)
	defer lock.Close()
	testutil.NoErr(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	if _, err := e.run(time.Minute, "image", "exists", tag); err == nil {
		t.Logf("image %s: in podman's store", tag)
		return tag
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "nsenter", "--mount=/proc/"+strconv.Itoa(e.ns)+"/ns/mnt", "--", "/bin/sh", script, tag)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("building the image (%s %s): %v\n%s", script, tag, err, e2eTail(string(out), 6000))
	}
	t.Logf("image %s: built with debootstrap in %v", tag, time.Since(start).Round(time.Second))
	if out, err := e.run(time.Minute, "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference="+podmanImageRepo); err == nil {
		for _, old := range strings.Fields(out) {
			if old != tag && strings.HasPrefix(old, podmanImageRepo+":") {
				if o, err := e.run(time.Minute, "rmi", old); err != nil {
					t.Logf("podman rmi %s (an older image of this test): %v %s", old, err, o)
				}
			}
		}
	}
	return tag
}

// probe runs `true` in a container of the image with runtime rt: a host
// where the engine itself cannot run a container skips, saying why.
func (e *podmanEnv) probe(t *testing.T, rt string) {
	t.Helper()
	args := append(append([]string{"--runtime", rt, "run", "--rm", "--network", "none", "--pull", "never"}, e.ulimits...), e.image, "true")
	if out, err := e.run(2*time.Minute, args...); err != nil {
		testutil.RequireOrSkip(t, "podman cannot run a container with %s on this host (podman %s): %v: %s", rt, strings.Join(args, " "), err, out)
	}
}

// podmanReady is the driver's E2E-READY line.
type podmanReady struct {
	KernelIDs  []string       `json:"kernel_ids"`
	Children   map[string]int `json:"children"`
	Supervisor int            `json:"supervisor"`
	Error      string         `json:"error"`
}

// variant runs one container of variant v with runtime rt to its end.
func (e *podmanEnv) variant(t *testing.T, s *e2eSuite, rt string, v podmanVariant, kill bool) {
	began := time.Now()
	mode := "root"
	if e.user != nil {
		mode = "rootless"
	}
	name := fmt.Sprintf("tfgpu-e2e-%s-%s-%s-%d-%06x", mode, rt, v.name, os.Getpid(), time.Now().UnixNano()&0xffffff)
	testdata, err := filepath.Abs("testdata")
	testutil.NoErr(t, err)
	bin, out := s.bin, ""
	if e.user != nil { // what the container's root, the user on the host, can read and write
		bin, testdata, out = e.user.bin, e.user.testdata, e.user.scratch(t)
	} else {
		out = t.TempDir()
	}
	tag := e2eTag(t)
	kernel, wrapped, driver := "tfgpu", "1", v.name
	if v.stock {
		kernel, wrapped = "python3", "0"
	}
	if v.driver != "" {
		driver = v.driver
	}
	args := []string{"--runtime", rt, "run", "--name", name, "--label", podmanLabel + "=" + strconv.Itoa(os.Getpid()),
		"--network", "none", "--pull", "never"}
	args = append(append(append(args, e.ulimits...), v.args...),
		"-v", bin+":/opt/tfgpu/tfgpu-kernel:ro",
		"-v", testdata+":/opt/tfgpu/testdata:ro",
		"-v", out+":/e2e",
		"-e", "E2E_TMP=/e2e", "-e", "E2E_TAG="+tag, "-e", "E2E_KERNEL="+kernel, "-e", "E2E_WRAPPED="+wrapped,
		"-e", "E2E_TFGPU_BIN=/opt/tfgpu/tfgpu-kernel", "-e", "E2E_ROOTLESS="+map[bool]string{true: "1", false: "0"}[e.user != nil],
		"-e", "PYTHONDONTWRITEBYTECODE=1", "-e", "PYTHONUNBUFFERED=1", "-e", "PYDEVD_DISABLE_FILE_VALIDATION=1")
	for _, kv := range v.env {
		args = append(args, "-e", kv)
	}
	args = append(args, e.image, "python3", "/opt/tfgpu/testdata/engines/podman_driver.py", driver)
	ctx, cancel := context.WithTimeout(context.Background(), podmanReadyWait+60*time.Second)
	defer cancel()
	run := e.podman(ctx, args...)
	var stderr testutil.Buffer
	run.Stderr = &stderr
	stdout, err := run.StdoutPipe()
	testutil.NoErr(t, err)
	run.WaitDelay = 5 * time.Second
	if err := run.Start(); err != nil {
		t.Fatalf("podman run: %v", err)
	}
	runDone := make(chan error, 1)
	lines := make(chan string, 16) // the driver's E2E- lines: two
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "E2E-") {
				select {
				case lines <- sc.Text():
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		close(lines)
		runDone <- run.Wait()
	}()
	// Cleanups run last-in first-out: the container is removed, then the
	// podman run process reaped (killed first if it is still there), then
	// what the runtime left of the container's cgroups removed.
	var hostCgroups []string
	t.Cleanup(func() { podmanRemoveCgroups(t, hostCgroups) })
	t.Cleanup(func() {
		select {
		case <-runDone:
		case <-time.After(10 * time.Second):
			run.Process.Kill()
			<-runDone
		}
	})
	t.Cleanup(func() {
		if o, err := e.run(time.Minute, "rm", "-f", "-t", "0", name); err != nil {
			t.Errorf("podman rm -f -t 0 %s: %v %s", name, err, o)
		}
	})

	// The driver's verdict, then its kernel and children running.
	var res e2eResult
	var ready podmanReady
	var haveRes, haveReady bool
	timeout := time.After(podmanReadyWait)
	for !haveReady {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the container ended before the driver was ready (result %v)\nstderr:\n%s", haveRes, e2eTail(stderr.String(), 8000))
			}
			if rest, ok := strings.CutPrefix(l, "E2E-RESULT "); ok {
				if err := json.Unmarshal([]byte(rest), &res); err != nil {
					t.Fatalf("bad E2E-RESULT line %q: %v", l, err)
				}
				haveRes = true
			} else if rest, ok := strings.CutPrefix(l, "E2E-READY "); ok {
				if err := json.Unmarshal([]byte(rest), &ready); err != nil {
					t.Fatalf("bad E2E-READY line %q: %v", l, err)
				}
				haveReady = true
			}
		case <-timeout:
			t.Fatalf("the driver was not ready within %v (result %v)\nstderr:\n%s", podmanReadyWait, haveRes, e2eTail(stderr.String(), 8000))
		}
	}
	facts, _ := json.MarshalIndent(res.Facts, "", "  ")
	t.Logf("%s in a %s %s container, ready after %v; facts: %s", v.name, mode, rt, time.Since(began).Round(time.Millisecond), facts)
	if !haveRes || !res.OK {
		t.Errorf("%s (%s): %s\nstderr:\n%s", v.name, rt, res.Error, e2eTail(stderr.String(), 6000))
	}
	if ready.Error != "" {
		t.Errorf("no kernel with its children to stop: %s", ready.Error)
	}

	// The host's view of the container just before it is stopped.
	ipid, err := e.run(time.Minute, "inspect", "--format", "{{.State.Pid}} {{.OCIRuntime}}", name)
	if err != nil {
		t.Fatalf("podman inspect %s: %v %s", name, err, ipid)
	}
	f := strings.Fields(ipid)
	initPid, _ := strconv.Atoi(f[0])
	if initPid <= 0 || len(f) < 2 || f[1] != rt {
		t.Fatalf("podman inspect %s: pid and runtime %q, want a pid and %s", name, ipid, rt)
	}
	hostCgroups, err = podmanCgroupDirs(initPid)
	if err != nil && e.user == nil {
		t.Fatal(err)
	}
	// A rootless container on cgroup v1 has no cgroup of its own: its
	// processes stay in the cgroups of the user who ran podman, the
	// test's here, which are not the container's to check or remove.
	hostCgroups = podmanNotOurs(hostCgroups)
	if e.user != nil {
		t.Logf("rootless: the container's own cgroups on the host: %v (none: it stays in its user's)", hostCgroups)
	}
	pids := podmanProcesses(initPid, hostCgroups, tag)
	ours := podmanOurCgroups(hostCgroups, ready.KernelIDs)
	t.Logf("before the stop: container cgroups %v\n  tfgpu cgroups %v\n  processes (host pids):\n  %s",
		hostCgroups, ours, strings.Join(e2eDescribe(pids), "\n  "))
	if v.stock {
		t.Logf("stock kernel: %v", res.Facts["stock_differences"])
	}
	if v.name == "privileged" && len(ours) == 0 {
		t.Errorf("privileged: no tfgpu-* cgroup under the container's %v: the supervisor made none of its own", hostCgroups)
	}
	if ready.Error == "" && len(pids) < 5 {
		t.Errorf("only %d processes in the container before the stop; want its init, the driver, the supervisor, the kernel and its children", len(pids))
	}

	how := []string{"stop", "-t", "2", name}
	if kill {
		how = []string{"kill", name}
	}
	t0 := time.Now()
	if o, err := e.run(time.Minute, how...); err != nil {
		t.Errorf("podman %s: %v %s", strings.Join(how, " "), err, o)
	}
	returned := time.Now()
	var alive, cgLeft, oursLeft, zombies []string
	for {
		alive = e2eDescribe(e2eAlive(tag, pids))
		zombies = e2eDescribe(podmanZombies(pids))
		cgLeft = cgLeft[:0]
		for _, d := range hostCgroups {
			if _, err := os.Stat(d); err == nil {
				cgLeft = append(cgLeft, d)
			}
		}
		oursLeft = podmanOurCgroups(hostCgroups, ready.KernelIDs)
		if len(alive)+len(zombies)+len(cgLeft)+len(oursLeft) == 0 || time.Since(returned) > e2eSurviveWait {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("podman %s took %v; %d processes, %d container cgroups, %d tfgpu cgroups; all gone %v after it returned",
		strings.Join(how, " "), returned.Sub(t0).Round(time.Millisecond), len(pids), len(hostCgroups), len(ours),
		time.Since(returned).Round(time.Millisecond))
	if len(zombies) > 0 {
		t.Errorf("podman %s: processes of the container left zombies %v after it returned:\n  %s", how[0], e2eSurviveWait, strings.Join(zombies, "\n  "))
	}
	if len(alive) > 0 {
		t.Errorf("podman %s: processes of the container alive %v after it returned:\n  %s", how[0], e2eSurviveWait, strings.Join(alive, "\n  "))
		var p []int
		for _, pid := range pids {
			if e2eLive(pid) {
				p = append(p, pid)
			}
		}
		e2eKill(p)
	}
	if len(cgLeft) > 0 {
		t.Errorf("podman %s: the container's cgroups still there %v after it returned: %v", how[0], e2eSurviveWait, podmanDescribeCgroups(cgLeft))
	}
	if len(oursLeft) > 0 {
		t.Errorf("podman %s: tfgpu cgroups of the container's kernels still there %v after it returned: %v", how[0], e2eSurviveWait, podmanDescribeCgroups(oursLeft))
	}
	select {
	case err := <-runDone:
		runDone <- err
		t.Logf("podman run ended: %v; the variant took %v", err, time.Since(began).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Errorf("podman run still running 10 s after podman %s", how[0])
	}
}

// podmanZombies are the pids of pids in state Z: dead, never reaped.
func podmanZombies(pids []int) []int {
	var out []int
	for _, p := range pids {
		if st, _, ok := testutil.ProcStat(p); ok && st == 'Z' {
			out = append(out, p)
		}
	}
	return out
}

// podmanNotOurs are the cgroup directories of dirs that are not this
// test process's own.
func podmanNotOurs(dirs []string) []string {
	own, _ := podmanCgroupDirs(os.Getpid())
	var out []string
	for _, d := range dirs {
		mine := false
		for _, o := range own {
			mine = mine || d == o
		}
		if !mine {
			out = append(out, d)
		}
	}
	return out
}

// podmanCgroupMount is a cgroup file system mounted here.
type podmanCgroupMount struct {
	dir, root string
	v2        bool
	opts      map[string]bool // super options: rw, the controllers, name=...
}

func podmanCgroupMounts() ([]podmanCgroupMount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []podmanCgroupMount
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		i := 0
		for i < len(f) && f[i] != "-" {
			i++
		}
		if len(f) < 5 || i+3 >= len(f) || (f[i+1] != "cgroup" && f[i+1] != "cgroup2") {
			continue
		}
		m := podmanCgroupMount{dir: f[4], root: f[3], v2: f[i+1] == "cgroup2", opts: map[string]bool{}}
		for _, o := range strings.Split(f[i+3], ",") {
			m.opts[o] = true
		}
		out = append(out, m)
	}
	return out, nil
}

// podmanCgroupDirs are pid's cgroup directories in every hierarchy
// mounted here, as /proc/PID/cgroup names them.
func podmanCgroupDirs(pid int) ([]string, error) {
	mounts, err := podmanCgroupMounts()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || f[2] == "/" {
			continue
		}
		for _, m := range mounts {
			match := m.v2 == (f[1] == "")
			for _, c := range strings.Split(f[1], ",") {
				match = match && (c == "" || m.opts[c])
			}
			if match && (m.root == "/" || strings.HasPrefix(f[2], m.root+"/")) {
				dirs = append(dirs, filepath.Join(m.dir, strings.TrimPrefix(f[2], strings.TrimSuffix(m.root, "/"))))
				break
			}
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no cgroup of pid %d found in the mounted hierarchies:\n%s", pid, data)
	}
	return dirs, nil
}

// podmanProcesses are the container's processes by host pid: init and its
// descendants, every process in its cgroups (and their subgroups), and
// every process carrying its E2E_TAG.
func podmanProcesses(initPid int, cgroups []string, tag string) []int {
	set := map[int]bool{initPid: true}
	for _, d := range cgroups {
		filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				for _, s := range strings.Fields(string(b)) {
					if n, err := strconv.Atoi(s); err == nil {
						set[n] = true
					}
				}
			}
			return nil
		})
	}
	kids := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			if _, ppid, ok := testutil.ProcStat(p); ok {
				kids[ppid] = append(kids[ppid], p)
			}
		}
	}
	for todo := []int{initPid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, c := range kids[p] {
			set[c] = true
			todo = append(todo, c)
		}
	}
	for _, p := range e2eAlive(tag, nil) {
		set[p] = true
	}
	out := make([]int, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// podmanOurCgroups are the cgroup directories named tfgpu-* anywhere under
// /sys/fs/cgroup that belong to the container: inside its cgroups, or
// named after one of its kernels (tfgpu-<kernel id>-<pid>).
func podmanOurCgroups(container []string, kernelIDs []string) []string {
	var out []string
	mounts, _ := podmanCgroupMounts()
	seen := map[string]bool{}
	for _, m := range mounts {
		if seen[m.dir] {
			continue
		}
		seen[m.dir] = true
		filepath.WalkDir(m.dir, func(p string, de os.DirEntry, err error) error {
			if err != nil || !de.IsDir() || !strings.HasPrefix(de.Name(), "tfgpu-") {
				return nil
			}
			mine := false
			for _, c := range container {
				mine = mine || strings.HasPrefix(p, c+"/")
			}
			for _, id := range kernelIDs {
				mine = mine || (id != "" && strings.HasPrefix(de.Name(), "tfgpu-"+id+"-"))
			}
			if mine {
				out = append(out, p)
			}
			return nil
		})
	}
	sort.Strings(out)
	return out
}

// podmanDescribeCgroups: each directory with the processes it holds.
func podmanDescribeCgroups(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		out = append(out, fmt.Sprintf("%s (processes %v)", d, strings.Fields(string(b))))
	}
	return out
}

// podmanRemoveCgroups removes what is left of the container's cgroups
// (after a failure), the deepest first; a cgroup still holding a process
// stays and is reported.
func podmanRemoveCgroups(t *testing.T, dirs []string) {
	var all []string
	for _, d := range dirs {
		filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				all = append(all, p)
			}
			return nil
		})
	}
	sort.Slice(all, func(i, j int) bool { return strings.Count(all[i], "/") > strings.Count(all[j], "/") })
	for _, d := range all {
		if err := syscall.Rmdir(d); err != nil && err != syscall.ENOENT {
			t.Logf("cleanup: the container's cgroup %s stays: %v", d, err)
		} else if err == nil {
			t.Logf("cleanup: removed the container's cgroup %s, left by the runtime", d)
		}
	}
}

// podmanUser is the ordinary user the rootless subtests run podman as:
// made with useradd for the test, with subordinate uid and gid ranges
// (newuidmap/newgidmap map them into podman's user namespace), a runtime
// directory /run/user/UID as logind would make it, the image in their
// own store, and the binary and testdata where they can read them (the
// container's root is that user on the host).
type podmanUser struct {
	localUser
	run      string // XDG_RUNTIME_DIR
	bin      string // tfgpu-kernel, theirs to read
	testdata string // a copy of testdata/e2e and testdata/engines
}

// argv runs the rest as the user: setpriv with their uid, gid and groups
// and a fresh environment (HOME, USER, PATH of setpriv --reset-env), and
// their runtime directory, which rootless podman keeps its state in.
func (u *podmanUser) argv() []string {
	return []string{"setpriv", "--reuid=" + strconv.Itoa(u.uid), "--regid=" + strconv.Itoa(u.gid), "--init-groups", "--reset-env",
		"env", "XDG_RUNTIME_DIR=" + u.run}
}

// scratch is a directory of the user's for one container's /e2e.
func (u *podmanUser) scratch(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(u.home, "e2e-")
	testutil.NoErr(t, err)
	testutil.NoErr(t, os.Chown(d, u.uid, u.gid))
	return d
}

// rootless makes the user and returns the engine as they use it: the
// same mount namespace (crun's hybrid-mode mask; rootless podman's pause
// process, which holds the user namespace every later podman command of
// theirs joins, is started in it by their first command, so it sees the
// mask too) and root's image, copied into their store with podman save
// and load. Every process of the user is SIGKILLed by pid and reaped
// before userdel removes them with their files.
func (e *podmanEnv) rootless(t *testing.T, s *e2eSuite) *podmanEnv {
	t.Helper()
	for _, tool := range []string{"setpriv", "newuidmap", "newgidmap"} {
		e2eRequireTool(t, tool)
	}
	u := &podmanUser{localUser: newLocalUser(t, "rl")}
	u.run = filepath.Join("/run/user", strconv.Itoa(u.uid))
	os.RemoveAll(u.run) // a uid that was another test's user
	for _, d := range []string{"/run/user", u.run} {
		testutil.NoErr(t, os.MkdirAll(d, 0o755))
	}
	testutil.NoErr(t, os.Chmod(u.run, 0o700))
	testutil.NoErr(t, os.Chown(u.run, u.uid, u.gid))
	t.Cleanup(func() { os.RemoveAll(u.run) })
	t.Cleanup(func() { podmanEndUser(t, u.uid) })
	podmanSubIDs(t, u.name)

	// Root's files, copied where the user (the container's root) can read them.
	u.bin = filepath.Join(u.home, "tfgpu-kernel")
	u.testdata = filepath.Join(u.home, "testdata")
	for _, c := range [][]string{
		{"install", "-m", "0755", s.bin, u.bin},
		{"mkdir", "-m", "0755", u.testdata},
		{"cp", "-R", filepath.Join("testdata", "e2e"), filepath.Join("testdata", "engines"), u.testdata},
		{"chmod", "-R", "a+rX,go-w", u.testdata},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", strings.Join(c, " "), err, out)
		}
	}
	ru := *e
	ru.user = u
	ru.loadImage(t, e)
	t.Logf("rootless: user %s (uid %d), subordinate ids %s", u.name, u.uid, podmanSubIDLines(u.name))
	return &ru
}

// loadImage copies root's image (root, e) into the user's store: podman
// save as root into a file the user can read, podman load as the user.
func (e *podmanEnv) loadImage(t *testing.T, root *podmanEnv) {
	t.Helper()
	start := time.Now()
	archive := filepath.Join(e.user.home, "image.tar")
	if out, err := root.run(5*time.Minute, "save", "-o", archive, root.image); err != nil {
		t.Fatalf("podman save %s (root's): %v %s", root.image, err, out)
	}
	defer os.Remove(archive)
	testutil.NoErr(t, os.Chmod(archive, 0o644))
	if out, err := e.run(5*time.Minute, "load", "-i", archive); err != nil {
		t.Fatalf("podman load as %s: %v %s", e.user.name, err, out)
	}
	if out, err := e.run(time.Minute, "info", "--format", "{{.Host.Security.Rootless}} {{.Store.GraphDriverName}} {{.Host.CgroupsVersion}}"); err != nil || !strings.HasPrefix(out, "true ") {
		t.Fatalf("podman info as %s: %v %q: not rootless", e.user.name, err, out)
	} else {
		t.Logf("rootless podman as %s: rootless, storage driver, cgroups: %s; image loaded in %v", e.user.name, out, time.Since(start).Round(time.Millisecond))
	}
}

// podmanSubIDs gives the user subordinate uid and gid ranges unless
// useradd did (Debian's does, with SUB_UID_COUNT in login.defs, when
// /etc/subuid exists): usermod picks none itself, so the range is the
// first 65536 ids above every range in the files. userdel removes them.
func podmanSubIDs(t *testing.T, name string) {
	t.Helper()
	if podmanSubIDLines(name) != "" {
		return
	}
	next := 100000
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		data, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			err = os.WriteFile(f, nil, 0o644)
		}
		testutil.NoErr(t, err)
		for _, l := range strings.Split(string(data), "\n") {
			p := strings.Split(l, ":")
			if len(p) == 3 {
				a, _ := strconv.Atoi(p[1])
				n, _ := strconv.Atoi(p[2])
				next = max(next, a+n)
			}
		}
	}
	r := fmt.Sprintf("%d-%d", next, next+65535)
	if out, err := exec.Command("usermod", "--add-subuids", r, "--add-subgids", r, name).CombinedOutput(); err != nil {
		t.Fatalf("usermod --add-subuids %s --add-subgids %s %s: %v %s", r, r, name, err, out)
	}
}

// podmanSubIDLines are the user's lines of /etc/subuid and /etc/subgid.
func podmanSubIDLines(name string) string {
	var out []string
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		data, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, name+":") {
				out = append(out, filepath.Base(f)+" "+l)
			}
		}
	}
	return strings.Join(out, ", ")
}

// podmanEndUser SIGKILLs every process of uid, the rootless user made for
// the test (rootless podman's pause process, a conmon a failure left), by
// pid, and waits until none is left, zombies included, so that userdel
// finds none.
func podmanEndUser(t *testing.T, uid int) {
	left := func() []int {
		var out []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			var st syscall.Stat_t
			if err == nil && syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
				out = append(out, pid)
			}
		}
		return out
	}
	pids := left()
	if len(pids) > 0 {
		t.Logf("cleanup: the rootless user's processes, SIGKILLed: %s", strings.Join(e2eDescribe(pids), "; "))
	}
	e2eKill(pids)
	deadline := time.Now().Add(e2eSurviveWait)
	for len(left()) > 0 && time.Now().Before(deadline) {
		// conmon's, reparented to the test binary (a subreaper) when they exited
		e2eReapOrphans()
		time.Sleep(20 * time.Millisecond)
	}
	if l := left(); len(l) > 0 {
		t.Errorf("cleanup: processes of uid %d still there %v after SIGKILL: %s", uid, e2eSurviveWait, strings.Join(e2eDescribe(l), "; "))
	}
}
