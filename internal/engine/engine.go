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
	"strconv"
	"strings"

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

// Detect reads the environment, /proc/self/cgroup and the parent chain.
func Detect() Engine {
	cg, _ := os.ReadFile("/proc/self/cgroup")
	return detect(os.Getenv, exists, cg, ancestorComms(os.Getpid()))
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
		if e.Runtime != "" {
			return "a " + e.Runtime + " container"
		}
		return "a container"
	}
	return "this host"
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
