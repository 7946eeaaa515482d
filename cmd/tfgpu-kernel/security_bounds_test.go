//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Issue 33, class 9 of docs/security.md#threats: root's work per user is
// bounded. mallory starts a thousand processes named tfgpu-kernel (a
// 3-line C program that pauses), each run as `tfgpu-kernel run -f
// …/kernel-ID.json` and holding 64 directories of hers open, each with a
// 1 MiB record of that kernel id: before, root read and parsed the record
// in each directory for each "supervisor" (64 GB of JSON for ps). Now
// root's ps, its Prometheus text, doctor and stop --idle-for each read at
// most a user's share of processes, directories and record bytes, say that
// mallory's share ran out, and still list alice's kernel. Their times with
// and without the fakes are printed side by side (no timed assertion).
func TestSecurityRootsWorkPerUserIsBounded(t *testing.T) {
	bin := sharedBinary(t)
	alice, mallory := newLocalUser(t, "alice"), newLocalUser(t, "mallory")
	aliceState := alice.mkdir(t, filepath.Join(alice.home, "state"), 0o700)
	alices := startUserSupervisor(t, bin, alice, aliceState, -1, "proc", "exec sleep 600")
	aliceID := "5b2c1e7a-aaaa-4bbb-8ccc-000000000001" // connFileFor's

	env := append(os.Environ(), "TFGPU_STATE_DIR=")
	root := func(args ...string) (string, time.Duration) {
		t.Helper()
		t0 := time.Now()
		code, out := runAs(t, nil, env, 2*time.Minute, bin, args...)
		took := time.Since(t0)
		if code != 0 && args[0] != "doctor" {
			t.Fatalf("root's %s (exit %d, %v):\n%s", strings.Join(args, " "), code, took, e2eTail(out, 3000))
		}
		return out, took
	}
	listsAlice := func(out string) bool {
		rows, ok := psRows(out)
		if !ok {
			t.Fatalf("root's ps --json:\n%s", e2eTail(out, 3000))
		}
		return slices.ContainsFunc(rows, func(r record.KernelStatus) bool {
			return r.KernelID == aliceID && r.UID == alice.uid && r.SupervisorPID == alices.cmd.Process.Pid
		})
	}
	median := func(args ...string) (string, time.Duration) {
		var out string
		var d []time.Duration
		for range 3 {
			o, took := root(args...)
			out, d = o, append(d, took)
		}
		slices.Sort(d)
		return out, d[1]
	}
	cmds := [][]string{{"ps", "--json"}, {"ps", "--format", "prometheus"}, {"doctor"}, {"stop", "--idle-for", "24h"}}
	before := map[string]time.Duration{}
	for _, c := range cmds {
		out, took := median(c...)
		before[strings.Join(c, " ")] = took
		if strings.Join(c, " ") == "ps --json" && !listsAlice(out) {
			t.Fatalf("root's ps does not list alice's kernel even without the fakes:\n%s", out)
		}
	}

	// mallory's fakes.
	fake := filepath.Join(sharedDir(t), "tfgpu-kernel")
	src := fake + ".c"
	os.WriteFile(src, []byte("#include <unistd.h>\nint main(void) { for (;;) pause(); }\n"), 0o644)
	if out, err := exec.Command("gcc", "-O2", "-o", fake, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	os.Chmod(fake, 0o755)
	const nDirs, nFakes = 64, 1000
	const id = "5b2c1e7a-eeee-4bbb-8ccc-000000000001"
	big := recordJSON(t, record.State{KernelID: id, SupervisorPID: 1 << 30, Phase: record.PhaseRunning,
		Session: strings.Repeat("x", 1<<20-512)})
	var dirs []*os.File
	for i := range nDirs {
		d := mallory.mkdir(t, filepath.Join(mallory.home, fmt.Sprintf("d%02d", i)), 0o700)
		mallory.own(t, filepath.Join(d, id+".json"), big, 0o600)
		f, err := os.Open(d)
		testutil.NoErr(t, err)
		defer f.Close()
		dirs = append(dirs, f)
	}
	t.Cleanup(func() { testutil.KillUID(mallory.uid) })
	var fakes []*exec.Cmd
	for range nFakes {
		c := exec.Command(fake, "run", "-f", "/nonexistent/kernel-"+id+".json", "--", "python3")
		c.ExtraFiles = dirs
		c.SysProcAttr = &syscall.SysProcAttr{Credential: mallory.credential, Setpgid: true}
		testutil.NoErr(t, c.Start())
		fakes = append(fakes, c)
	}
	t.Cleanup(func() {
		for _, c := range fakes {
			c.Process.Kill()
			c.Wait()
		}
	})
	last := strconv.Itoa(fakes[len(fakes)-1].Process.Pid)
	for i := 0; ; i++ {
		if l, _ := os.Readlink("/proc/" + last + "/fd/" + strconv.Itoa(3+nDirs-1)); l != "" {
			if comm, _ := os.ReadFile("/proc/" + last + "/comm"); strings.TrimSpace(string(comm)) == "tfgpu-kernel" {
				break
			}
		}
		if i == 500 {
			t.Fatalf("the last fake does not hold mallory's directories")
		}
		time.Sleep(10 * time.Millisecond)
	}

	var report []string
	for _, c := range cmds {
		out, took := median(c...)
		key := strings.Join(c, " ")
		report = append(report, fmt.Sprintf("%-26s %8v without, %8v with %d fakes (%.1f×)", key, before[key].Round(time.Millisecond),
			took.Round(time.Millisecond), nFakes, float64(took)/float64(max(before[key], time.Millisecond))))
		switch key {
		case "ps --json":
			if !listsAlice(out) {
				t.Errorf("with mallory's fakes, root's ps does not list alice's kernel:\n%s", e2eTail(out, 3000))
			}
		case "ps --format prometheus":
			if !strings.Contains(out, `kernel_id="`+aliceID+`"`) {
				t.Errorf("with mallory's fakes, root's metrics do not have alice's kernel")
			}
		}
		if key != "stop --idle-for 24h" && !strings.Contains(out, fmt.Sprintf("uid %d (%s) has more than", mallory.uid, mallory.name)) {
			t.Errorf("root's %s does not say mallory's share ran out:\n%s", key, e2eTail(out, 3000))
		}
		if strings.Count(out, "\n") > 200 {
			t.Errorf("root's %s printed %d lines with mallory's fakes: one per user is enough", key, strings.Count(out, "\n"))
		}
	}
	t.Logf("root's commands, median of 3:\n  %s", strings.Join(report, "\n  "))
	if !alive(alices.cmd.Process.Pid) {
		t.Error("alice's supervisor died")
	}
}

// Issue 33, class 10: what a user puts in root's output is bounded. alice's
// notebook is named with 120 KiB (JPY_SESSION_NAME, which the supervisor
// records): root's ps line, its --json and its Prometheus text carry at
// most MaxName bytes of it, cut visibly; before, each carried all of it
// (~720 KB per kernel in the metrics).
func TestSecurityUserStringsInRootsOutputAreBounded(t *testing.T) {
	bin := sharedBinary(t)
	alice := newLocalUser(t, "alice")
	state := alice.mkdir(t, filepath.Join(alice.home, "state"), 0o700)
	conn := connFileFor(t, alice)
	name := strings.Repeat("n\u202e", 120<<10/4) + ".ipynb" // with a bidi override to replace, too
	cmd := exec.Command(bin, "run", "--cgroup", "proc", "-f", conn, "--", "/bin/sh", "-c", "exec sleep 600")
	cmd.Env = userEnv(alice, "TFGPU_STATE_DIR="+state, "JPY_SESSION_NAME="+name)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: alice.credential, Setpgid: true}
	logf, err := os.Create(filepath.Join(t.TempDir(), "log"))
	testutil.NoErr(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	testutil.NoErr(t, cmd.Start())
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	bobKernelPID(t, state, "5b2c1e7a-aaaa-4bbb-8ccc-000000000001") // recorded

	env := append(os.Environ(), "TFGPU_STATE_DIR=")
	_, table := runAs(t, nil, env, time.Minute, bin, "ps")
	_, js := runAs(t, nil, env, time.Minute, bin, "ps", "--json")
	_, prom := runAs(t, nil, env, time.Minute, bin, "ps", "--format", "prometheus")
	for _, l := range strings.Split(table, "\n") {
		if len(l) > 2*record.MaxName+512 {
			t.Errorf("root's ps printed a line of %d bytes", len(l))
		}
	}
	rows, ok := psRows(js)
	if !ok {
		t.Fatalf("root's ps --json:\n%s", e2eTail(js, 2000))
	}
	found := false
	for _, r := range rows {
		if r.UID != alice.uid {
			continue
		}
		found = true
		if len(r.Session) > record.MaxName || !strings.Contains(r.Session, "…(+") || strings.ContainsRune(r.Session, '\u202e') {
			t.Errorf("root's ps --json shows alice's notebook as %d bytes (%.80q…): want at most %d, cut visibly, no bidi override",
				len(r.Session), r.Session, record.MaxName)
		}
	}
	if !found {
		t.Fatalf("root's ps --json does not list alice's kernel:\n%s", e2eTail(js, 2000))
	}
	for _, l := range strings.Split(prom, "\n") {
		if strings.Contains(l, `user="`+alice.name+`"`) && len(l) > 2*record.MaxName+512 {
			t.Errorf("root's metrics have a line of %d bytes for alice's kernel", len(l))
		}
	}
	t.Logf("root's output for alice's kernel: ps %d bytes, --json %d, prometheus %d (her notebook's name: %d bytes)",
		len(table), len(js), len(prom), len(name))
}

// psRows parses ps --json's array out of its output with the refusals it
// printed on stderr before it (runAs gives both): the array starts a line.
func psRows(out string) ([]record.KernelStatus, bool) {
	i := strings.Index(out, "\n[")
	switch {
	case strings.HasPrefix(out, "["):
		i = 0
	case i >= 0:
		i++
	default:
		return nil, false
	}
	var rows []record.KernelStatus
	return rows, json.Unmarshal([]byte(out[i:]), &rows) == nil
}
