//go:build linux

package engine

import (
	"strings"
	"testing"
)

// What the supervisor runs inside, from the facts Detect reads: the
// environment, marker files, /proc/self/cgroup and the parent chain.
func TestDetect(t *testing.T) {
	slurmV1 := "12:freezer:/slurm/uid_1000/job_12/step_batch\n11:memory:/slurm/uid_1000/job_12/step_batch/task_0\n" +
		"10:cpuset,cpuacct:/slurm/uid_1000/job_12/step_batch\n1:name=systemd:/\n0::/\n"
	for _, tc := range []struct {
		name      string
		env       map[string]string
		files     []string
		cgroup    string
		ancestors []string
		want      Engine
		wantName  string
	}{
		{name: "host", cgroup: "0::/user.slice\n", wantName: "this host"},
		{name: "slurm proctrack/cgroup v1", env: map[string]string{"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "batch"}, cgroup: slurmV1,
			want: Engine{Kind: Slurm, SlurmJob: "12", SlurmStep: "batch", JobCgroups: []JobCgroup{
				{"freezer", "/slurm/uid_1000/job_12"}, {"memory", "/slurm/uid_1000/job_12"}, {"cpuset,cpuacct", "/slurm/uid_1000/job_12"}}},
			wantName: "Slurm job 12 (step batch)"},
		{name: "slurm cgroup/v2", env: map[string]string{"SLURM_JOB_ID": "7"}, cgroup: "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n",
			want:     Engine{Kind: Slurm, SlurmJob: "7", JobCgroups: []JobCgroup{{"", "/system.slice/slurmstepd.scope/job_7"}}},
			wantName: "Slurm job 7"},
		{name: "slurm proctrack/linuxproc", env: map[string]string{"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0"}, cgroup: "0::/\n",
			ancestors: []string{"python3", "bash", "slurmstepd", "slurmd"}, want: Engine{Kind: Slurm, SlurmJob: "9", SlurmStep: "0"}},
		// salloc's shell on a login node: the variable, and no job around.
		{name: "salloc shell outside the job", env: map[string]string{"SLURM_JOB_ID": "9"}, cgroup: "0::/user.slice\n",
			ancestors: []string{"bash", "salloc", "sshd"}, wantName: "this host"},
		{name: "another job's cgroup", env: map[string]string{"SLURM_JOB_ID": "1"}, cgroup: "4:freezer:/slurm/uid_0/job_12/step_0\n"},
		{name: "bad job id", env: map[string]string{"SLURM_JOB_ID": "12; rm -rf"}, cgroup: slurmV1},
		{name: "bad step", env: map[string]string{"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "../x"}, cgroup: slurmV1,
			want: Engine{Kind: Slurm, SlurmJob: "12", JobCgroups: []JobCgroup{
				{"freezer", "/slurm/uid_1000/job_12"}, {"memory", "/slurm/uid_1000/job_12"}, {"cpuset,cpuacct", "/slurm/uid_1000/job_12"}}}},
		{name: "podman", files: []string{"/run/.containerenv"}, want: Engine{Kind: Container, Runtime: "podman"}, wantName: "a podman container"},
		{name: "docker", files: []string{"/.dockerenv"}, want: Engine{Kind: Container, Runtime: "docker"}},
		{name: "pod", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, want: Engine{Kind: Container, Runtime: "kubernetes"}},
		{name: "nspawn", env: map[string]string{"container": "systemd-nspawn"}, want: Engine{Kind: Container, Runtime: "systemd-nspawn"}},
		{name: "odd container value", env: map[string]string{"container": "a b\n"}},
		{name: "slurm in a container", env: map[string]string{"SLURM_JOB_ID": "12"}, files: []string{"/.dockerenv"}, cgroup: slurmV1,
			want: Engine{Kind: Slurm, SlurmJob: "12", JobCgroups: []JobCgroup{
				{"freezer", "/slurm/uid_1000/job_12"}, {"memory", "/slurm/uid_1000/job_12"}, {"cpuset,cpuacct", "/slurm/uid_1000/job_12"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			exists := func(p string) bool {
				for _, f := range tc.files {
					if f == p {
						return true
					}
				}
				return false
			}
			got := detect(getenv, exists, []byte(tc.cgroup), tc.ancestors)
			if got.Why == "" && got.Kind != Host {
				t.Errorf("no evidence given for %s", got)
			}
			got.Why = ""
			if got.String() != tc.want.String() || got.Kind != tc.want.Kind || got.Runtime != tc.want.Runtime ||
				len(got.JobCgroups) != len(tc.want.JobCgroups) {
				t.Fatalf("detect = %+v; want %+v", got, tc.want)
			}
			for i := range got.JobCgroups {
				if got.JobCgroups[i] != tc.want.JobCgroups[i] {
					t.Errorf("JobCgroups[%d] = %+v; want %+v", i, got.JobCgroups[i], tc.want.JobCgroups[i])
				}
			}
			if tc.wantName != "" && got.String() != tc.wantName {
				t.Errorf("String = %q; want %q", got.String(), tc.wantName)
			}
			if owner := got.LimitOwner(); !strings.HasPrefix(owner, "the ") {
				t.Errorf("LimitOwner = %q", owner)
			}
		})
	}
}

// Rootless tells an engine run by an ordinary user (uid 0 here is one
// ordinary uid of the host) from a root engine's namespaces: the initial
// one, a --userns remap, a map without uid 0 (#36).
func TestRootless(t *testing.T) {
	for _, tc := range []struct {
		name, uidMap string
		uid          int
		ok           bool
	}{
		{"rootless podman", "         0       1001          1\n         1     100000      65536\n     65537     200000      65536\n", 1001, true},
		{"unshare --map-root-user", "0 1000 1\n", 1000, true},
		{"the initial namespace", "         0          0 4294967295\n", 0, false},
		{"rootful --userns=auto", "0 100000 65536\n", 0, false},
		{"root mapped to root", "0 0 1\n", 0, false},
		{"no uid 0", "1000 1000 1\n", 0, false},
		{"empty", "", 0, false},
		{"garbage", "0 x 1\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid, ok := Rootless([]byte(tc.uidMap))
			if uid != tc.uid || ok != tc.ok {
				t.Errorf("Rootless(%q) = %d, %v; want %d, %v", tc.uidMap, uid, ok, tc.uid, tc.ok)
			}
		})
	}
	e := Engine{Kind: Container, Runtime: "podman", Rootless: true, HostUID: 1001}
	if got := e.String(); got != "a rootless podman container" {
		t.Errorf("String = %q", got)
	}
}
