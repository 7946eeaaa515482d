package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/jmsg"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// A standby whose supervisor ends (the leash closes without "restart")
// while its spare still imports gives up the spare at once, rather than
// when the imports are done: under load a Slurm job's standby outlived the
// job by seconds that way (TestE2ESlurm under -race). Here the spare
// preloads a module that marks its start, then sleeps a minute and marks
// its end; the leash is closed once the first mark is there, and the
// standby must exit with the spare gone and the second mark absent.
func TestStandbyGivesUpTheSpareWhenItsSupervisorEnds(t *testing.T) {
	testutil.RequireHermetic(t)
	installJupyterPython(t)
	bin := buildInstallTestBinary(t)
	dir := t.TempDir()
	mods := filepath.Join(dir, "mods")
	testutil.NoErr(t, os.Mkdir(mods, 0o755))
	started, finished := filepath.Join(dir, "started"), filepath.Join(dir, "finished")
	slow := "import os, time\nopen(" + strconv.Quote(started) + ", 'w').write(str(os.getpid()))\ntime.sleep(60)\nopen(" +
		strconv.Quote(finished) + ", 'w').close()\n"
	testutil.NoErr(t, os.WriteFile(filepath.Join(mods, "tfgpuslowimport.py"), []byte(slow), 0o644))
	id := "leash-0123"
	conn := filepath.Join(dir, "kernel-"+id+".json")
	if err := jmsg.WriteFile(conn, &jmsg.ConnInfo{Transport: "tcp", IP: "127.0.0.1", Ports: [5]int{1, 2, 3, 4, 5},
		Key: "k", SignatureScheme: "hmac-sha256"}); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal([]string{"--cgroup", "proc", "--preload", "tfgpuslowimport", "-f", conn, "--",
		"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", conn})
	r, w, err := os.Pipe()
	testutil.NoErr(t, err)
	cmd := exec.Command(bin, "standby", id)
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = append(os.Environ(), "TFGPU_STATE_DIR="+testutil.PrivateDir(t), "PYTHONPATH="+mods)
	// A file, not a pipe: Wait would wait for every holder of a pipe (the
	// spare inherits it).
	stderr, err := os.Create(filepath.Join(dir, "standby.log"))
	testutil.NoErr(t, err)
	defer stderr.Close()
	cmd.Stderr = stderr
	logOf := func() string { b, _ := os.ReadFile(stderr.Name()); return string(b) }
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	testutil.NoErr(t, cmd.Start())
	r.Close()
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		w.Close()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	if _, err := w.Write(append(args, '\n')); err != nil {
		t.Fatal(err)
	}
	// The spare's imports have begun: its module marked its start.
	var spare int
	for deadline := time.Now().Add(60 * time.Second); spare == 0; {
		if b, err := os.ReadFile(started); err == nil && len(b) > 0 {
			spare, _ = strconv.Atoi(string(b))
			break
		}
		select {
		case <-exited:
			t.Fatalf("the standby ended before its spare imported anything: %v\n%s", waitErr, logOf())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spare never started its imports:\n%s", logOf())
		}
	}
	w.Close() // the supervisor is gone: no "restart" was said
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("the standby exited with %v; want 0 (nothing went wrong)\n%s", waitErr, logOf())
		}
	case <-time.After(50 * time.Second): // the spare's import ends at 60 s
		t.Fatalf("the standby still waits for its spare's imports after its supervisor ended\n%s", logOf())
	}
	if _, err := os.Stat(finished); err == nil {
		t.Fatal("the spare's imports ran to their end: the standby waited for them")
	}
	if err := syscall.Kill(spare, 0); err == nil {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(spare) + "/stat"); !strings.Contains(string(b), ") Z ") {
			t.Fatalf("the spare (pid %d) outlived its standby", spare)
		}
	}
}
