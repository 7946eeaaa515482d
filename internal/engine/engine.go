//go:build linux

// Package engine tells what the supervisor runs inside: a Slurm job, a
// container, or a plain host, from facts of the running system, so that
// the kernel never fights the engine's own accounting and kill, and the
// user is told whose limit killed the kernel (docs/design.md#engines).
package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/bytesize"
	"github.com/tfgpu/tfgpu-kernel/internal/proc"
)

// Kinds of engine.
const (
	Host      = ""          // no engine found
	Slurm     = "slurm"     // a Slurm job step
	Container = "container" // a container (podman, docker, a Kubernetes pod, ...)
)

// Engine is what Detect found.
type Engine struct {
	Kind string
	// SlurmJob and SlurmStep are the job's id and step (SLURM_JOB_ID,
	// SLURM_STEP_ID: "batch", "0", ...), for Kind Slurm.
	SlurmJob, SlurmStep string
	// Runtime names the container engine where it says so: "podman",
	// "docker", "kubernetes", or $container (systemd's convention: lxc,
	// systemd-nspawn, ...); "" when unknown.
	Runtime string
	// Why is the evidence, for the log and doctor.
	Why string
	// Rootless is true in a container whose user namespace makes uid 0
	// one ordinary user of the host (HostUID), as an engine run by that
	// user sets up (rootless podman, rootless docker): see Rootless.
	Rootless bool
	HostUID  int
	// JobCgroups are the job's cgroups as /proc/self/cgroup names them,
	// each cut after its job_<id> component: controller ("" for cgroup2)
	// and path ("freezer", "/slurm/uid_1000/job_12").
	JobCgroups []JobCgroup
}

// JobCgroup is one hierarchy's cgroup of a Slurm job.
type JobCgroup struct{ Controllers, Path string }

// Inside Slurm: SLURM_JOB_ID names a job, and the system agrees that this
// process is in it: a cgroup path of /proc/self/cgroup has job_<id> in it
// (proctrack/cgroup, task/cgroup, cgroup/v2), or an ancestor process is
// slurmstepd (proctrack/linuxproc tracks by ancestry). The variable alone
// is not enough: salloc's shell on a login node has it, outside any job.
//
// Inside a container: podman's /run/.containerenv, docker's /.dockerenv,
// a Kubernetes pod's KUBERNETES_SERVICE_HOST, or $container.

// Detect reads the environment, /proc/self/cgroup, /proc/self/uid_map
// and the parent chain.
func Detect() Engine {
	cg, _ := os.ReadFile("/proc/self/cgroup")
	e := detect(os.Getenv, exists, cg, ancestorComms(os.Getpid()))
	if e.Kind == Container {
		m, _ := os.ReadFile("/proc/self/uid_map")
		e.HostUID, e.Rootless = Rootless(m)
	}
	return e
}

// Rootless reads a uid_map (user_namespaces(7)): ok when uid 0 here is
// exactly one uid of the parent namespace, and not its root. That is the
// map an engine run by an ordinary user writes (rootless podman, docker's
// rootlesskit: the user's own uid at 0, newuidmap's subordinate ids from
// 1); a root engine's --userns remap gives uid 0 a subordinate id in a
// larger range ("0 100000 65536"), and the initial namespace maps
// "0 0 4294967295". Such a user's engine can set a memory limit only
// where the host delegates a cgroup v2 memory controller to them.
func Rootless(uidMap []byte) (hostUID int, ok bool) {
	for _, l := range strings.Split(string(uidMap), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "0" {
			continue
		}
		out, err1 := strconv.Atoi(f[1])
		n, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil && n == 1 && out > 0 {
			return out, true
		}
		return 0, false
	}
	return 0, false
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func detect(getenv func(string) string, exists func(string) bool, selfCgroup []byte, ancestors []string) Engine {
	if job := getenv("SLURM_JOB_ID"); validJobID(job) {
		step := getenv("SLURM_STEP_ID")
		if !validStep(step) {
			step = ""
		}
		e := Engine{Kind: Slurm, SlurmJob: job, SlurmStep: step, JobCgroups: jobCgroups(selfCgroup, job)}
		if len(e.JobCgroups) > 0 {
			e.Why = "SLURM_JOB_ID=" + job + " and cgroup " + e.JobCgroups[0].Path
			return e
		}
		for _, c := range ancestors {
			if c == "slurmstepd" {
				e.Why = "SLURM_JOB_ID=" + job + " and slurmstepd among the parent processes"
				return e
			}
		}
		// Not in the job (salloc's shell on a login node): a host.
	}
	switch {
	case exists("/run/.containerenv"):
		return Engine{Kind: Container, Runtime: "podman", Why: "/run/.containerenv"}
	case exists("/.dockerenv"):
		return Engine{Kind: Container, Runtime: "docker", Why: "/.dockerenv"}
	case getenv("KUBERNETES_SERVICE_HOST") != "":
		return Engine{Kind: Container, Runtime: "kubernetes", Why: "KUBERNETES_SERVICE_HOST"}
	}
	if c := getenv("container"); c != "" && len(c) <= 32 && printableWord(c) {
		return Engine{Kind: Container, Runtime: c, Why: "container=" + c}
	}
	return Engine{}
}

// jobCgroups are the lines of /proc/self/cgroup with a job_<id>
// component, cut after it.
func jobCgroups(selfCgroup []byte, job string) []JobCgroup {
	var out []JobCgroup
	sc := bufio.NewScanner(bytes.NewReader(selfCgroup))
	for sc.Scan() {
		_, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		ctrl, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			continue
		}
		parts := strings.Split(p, "/")
		for i, c := range parts {
			if c == "job_"+job {
				out = append(out, JobCgroup{Controllers: ctrl, Path: strings.Join(parts[:i+1], "/")})
				break
			}
		}
	}
	return out
}

// ancestorComms are the comm names of pid's parents, nearest first (at
// most 64: a chain that long is not a process tree).
func ancestorComms(pid int) []string {
	var out []string
	for range 64 {
		p, err := proc.Read(pid)
		if err != nil || p.PPid <= 1 {
			return out
		}
		parent, err := proc.Read(p.PPid)
		if err != nil {
			return out
		}
		out = append(out, parent.Comm)
		pid = p.PPid
	}
	return out
}

func validJobID(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// validStep: a number or one of Slurm's named steps.
func validStep(s string) bool {
	switch s {
	case "batch", "extern", "interactive":
		return true
	}
	return validJobID(s)
}

func printableWord(s string) bool {
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// String names the engine for a user: "Slurm job 12 (step batch)", "a
// podman container", "this host".
func (e Engine) String() string {
	switch e.Kind {
	case Slurm:
		if e.SlurmStep != "" {
			return fmt.Sprintf("Slurm job %s (step %s)", e.SlurmJob, e.SlurmStep)
		}
		return "Slurm job " + e.SlurmJob
	case Container:
		rootless := ""
		if e.Rootless {
			rootless = "rootless "
		}
		if e.Runtime != "" {
			return "a " + rootless + e.Runtime + " container"
		}
		return "a " + rootless + "container"
	}
	return "this host"
}

// ContainerLimit says which memory limit holds a kernel in container e,
// for the first cell and doctor: limit is the smallest above the
// supervisor (cgroup.OuterMemory: 0 for none, dir the cgroup that sets
// it), memoryV1 whether the memory controller is a v1 hierarchy. A
// rootless container on cgroup v1 has no cgroup of its own, and its
// engine ignores --memory there (podman 4.3: "Resource limits are not
// supported and ignored on cgroups V1 rootless systems"): no option of
// the engine's can give it a limit; only the host's admin can, with
// cgroup v2 and the memory controller delegated to the user.
func (e Engine) ContainerLimit(limit int64, dir string, memoryV1 bool) string {
	opts := "podman/docker run --memory 8g, a pod's resources.limits.memory"
	if e.Runtime == "podman" || e.Runtime == "docker" {
		opts = e.Runtime + " run --memory 8g"
	}
	engineName := e.Runtime
	if engineName == "" {
		engineName = "the engine"
	}
	switch {
	case e.Rootless && memoryV1 && limit > 0:
		return fmt.Sprintf("a rootless container on cgroup v1 has no memory limit of its own (%s ignores --memory there); "+
			"the memory limit of %s of the host's cgroup %s, which holds the container, applies to the kernel", engineName, bytesize.Format(limit), dir)
	case e.Rootless && memoryV1:
		return fmt.Sprintf("no memory limit applies to this kernel: a rootless container on cgroup v1 has no cgroup of its own, "+
			"and none of %s's options can give it one (it ignores --memory there); only the host's admin can: "+
			"cgroup v2, with the memory controller delegated to the user who runs the container (uid %d)", engineName, e.HostUID)
	case limit > 0:
		return fmt.Sprintf("the container's memory limit of %s (cgroup %s) holds the kernel", bytesize.Format(limit), dir)
	case e.Rootless:
		return fmt.Sprintf("the container has no memory limit either, so no memory limit applies to this kernel "+
			"(%s gives it one where the host delegates the cgroup v2 memory controller to the user who runs it, uid %d)", opts, e.HostUID)
	}
	return fmt.Sprintf("the container has no memory limit either, so no memory limit applies to this kernel (%s gives it one)", opts)
}

// SlurmLimit says which memory limit holds a kernel in Slurm job e, for
// the first cell and doctor: limit is the smallest above the supervisor
// (cgroup.OuterMemory: 0 for none, dir the cgroup that sets it). The
// job's own, with its figure; a cgroup's above the job's (slurmd's, a
// slice's), when the job has none of its own; or none at all. sbatch
// --mem is the user's; whether Slurm enforces it (task/cgroup,
// ConstrainRAMSpace=yes) is the cluster admin's.
func (e Engine) SlurmLimit(limit int64, dir string) string {
	switch {
	case limit == 0:
		return "the job has no memory limit either, so no memory limit applies to this kernel " +
			"(Slurm enforces sbatch --mem only with task/cgroup and ConstrainRAMSpace=yes in cgroup.conf: ask the cluster's admin for them)"
	case !slices.Contains(strings.Split(dir, "/"), "job_"+e.SlurmJob):
		return fmt.Sprintf("the job has no memory limit of its own (task/cgroup and ConstrainRAMSpace=yes give it sbatch --mem's); "+
			"the memory limit of %s of cgroup %s, which holds the job, applies to the kernel", bytesize.Format(limit), dir)
	}
	return fmt.Sprintf("the job's own memory limit (%s) applies to the kernel (sbatch --mem sets it)", bytesize.Format(limit))
}

// LimitOwner is whose memory limit the cgroups the supervisor started in
// carry, for "killed … at the container's memory limit of 1 GiB".
func (e Engine) LimitOwner() string {
	switch e.Kind {
	case Slurm:
		return "the Slurm job's"
	case Container:
		return "the container's"
	}
	return "the enclosing cgroup's"
}
