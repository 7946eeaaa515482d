//go:build linux && e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/cgroup"
	"github.com/tfgpu/tfgpu-kernel/internal/gpu/gputest"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// podScript puts itself into the pod's cgroups ($1: the cgroup2 one, $2:
// the v1 memory one), then runs the rest of its arguments as the first
// process of new PID, mount and cgroup namespaces, with the cgroup file
// systems mounted afresh so that they show the pod's subtree as their
// root, as a container runtime (containerd, docker with cgroupns=private)
// gives a pod: what KubeSpawner's and `docker run --gpus all -m 8G`'s
// kernels see. $3 and $4 are where the two are mounted; the host's /proc
// is bind-mounted at $5 in the pod, for the fake NVML to tell host pids as
// a driver does (FAKE_NVML_HOST_PROC).
const podScript = `set -e
echo $$ > "$1/cgroup.procs"
echo $$ > "$2/cgroup.procs"
v2=$3 mem=$4 hostproc=$5
shift 5
exec unshare --mount --cgroup /bin/sh -c '
set -e
mount --bind /proc "$3"
umount "$1" && mount -t cgroup2 cgroup2 "$1"
umount "$2" && mount -t cgroup -o memory cgroup "$2"
shift 3
exec unshare --pid --fork --mount-proc --kill-child "$@"' sh "$v2" "$mem" "$hostproc" "$@"
`

// Issue 14, pods and containers: the end-to-end scenarios run as the
// first process of a pod's namespaces (podScript) with a delegated cgroup
// subtree: execution, the memory limit (oom.py), and with the fake NVML
// reporting host pids, the release confirmed by baseline and the GPU
// memory limit (gpu.py pod). Nothing the pod started outlives it (the
// host's view of E2E_TAG), and the pod's cgroups are empty afterwards,
// with no tfgpu-* cgroup left in them.
func TestE2EPod(t *testing.T) {
	s := e2eSetupStack(t, stackDebian)
	if !s.wrapped {
		t.Skip("containment in a pod is the supervisor's")
	}
	if os.Geteuid() != 0 {
		testutil.RequireOrSkip(t, "needs root to make PID, mount and cgroup namespaces")
	}
	e2eRequireTool(t, "unshare")
	l, err := cgroup.DetectLayout()
	if err != nil || l.V2Self == "" || l.V1["memory"] == "" {
		testutil.RequireOrSkip(t, "needs a cgroup2 tree and a v1 memory hierarchy (hybrid host): %+v %v", l, err)
	}
	memSelf, err := ownV1Cgroup("memory")
	testutil.NoErr(t, err)
	name := fmt.Sprintf("tfgpu-e2epod-%d", os.Getpid())
	pod := [2]string{filepath.Join(l.V2Self, name), filepath.Join(l.V1["memory"], memSelf, name)}
	for _, d := range pod {
		testutil.NoErr(t, os.Mkdir(d, 0o755))
		t.Cleanup(func() { os.Remove(d) })
	}
	if _, err := os.Stat(filepath.Join(pod[0], "cgroup.kill")); err != nil {
		testutil.RequireOrSkip(t, "needs cgroup.kill (Linux 5.14): %v", err)
	}
	hostProc := t.TempDir() // empty on the host; the host's /proc in the pod
	for _, sc := range []struct {
		name, script string
		args         []string
		env          []string
	}{
		{name: "execute", script: "basic.py"},
		{name: "memory limit", script: "oom.py"},
		{name: "gpu", script: "gpu.py", args: []string{"pod"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			f := gputest.New(t, 2, gputest.Full)
			gs := *s
			gs.env = append(append(append([]string{}, s.env...), f.Env()...),
				"E2E_TFGPU_BIN="+s.bin, "E2E_NVML_DIR="+f.LibDir, "E2E_HOLDER_DIR="+f.HolderDir, "FAKE_NVML_HOST_PROC="+hostProc)
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			r := gs.command(ctx, t, sc.script, sc.args...)
			r.cmd.Path = "/bin/sh"
			r.cmd.Args = append([]string{"sh", "-c", podScript, "pod", pod[0], pod[1], l.V2Mount, l.V1["memory"], hostProc,
				s.python}, r.cmd.Args[1:]...)
			testutil.NoErr(t, r.cmd.Start())
			err := r.cmd.Wait()
			ended := time.Now()
			res, perr := e2eParse(r.stdout.String())
			// The pids the scenario saw are the pod's; from here its
			// processes are found by E2E_TAG.
			s.checkAfter(t, r, nil, ended)
			checkPodEmpty(t, pod)
			if ctx.Err() != nil || perr != nil {
				t.Fatalf("%s in the pod: %v, %v (exit %v)\nstdout:\n%s\nstderr:\n%s", sc.script, ctx.Err(), perr, err,
					e2eTail(r.stdout.String(), 2000), e2eTail(r.stderr.String(), 6000))
			}
			facts, _ := json.MarshalIndent(res.Facts, "", "  ")
			t.Logf("%s in the pod, facts: %s", sc.script, facts)
			if !res.OK {
				t.Fatalf("%s in the pod: %s\nstderr:\n%s", sc.script, res.Error, e2eTail(r.stderr.String(), 6000))
			}
		})
	}
}

// checkPodEmpty: once its first process is gone, the pod's cgroups hold no
// process and no cgroup a supervisor made.
func checkPodEmpty(t *testing.T, pod [2]string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range pod {
		for {
			procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			ents, _ := os.ReadDir(d)
			var subs []string
			for _, e := range ents {
				if e.IsDir() {
					subs = append(subs, e.Name())
				}
			}
			if len(strings.TrimSpace(string(procs))) == 0 && len(subs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("pod cgroup %s after the pod ended: processes %q, cgroups %v", d, strings.Fields(string(procs)), subs)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// ownV1Cgroup is this process's cgroup path in the v1 hierarchy with
// controller (/proc/self/cgroup).
func ownV1Cgroup(controller string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && f[0] != "0" {
			for _, c := range strings.Split(f[1], ",") {
				if c == controller {
					return f[2], nil
				}
			}
		}
	}
	return "", fmt.Errorf("no v1 %s cgroup in /proc/self/cgroup", controller)
}
