//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/record"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// The spare kernel's adoption is a new surface: a unix socket in the state
// directory through which a launched supervisor hands a standby its
// connection file, argv and environment, and the standby becomes the
// kernel's supervisor (docs/security.md, docs/design.md#spare-kernel).
// Attacks by real users:
//
//   - alice's listener where bob's run looks for his kernel's standby
//     (put there by root: bob's own directory is 0700), first as alice's
//     socket file, then as a file chowned to bob: bob's run refuses it
//     (the file's owner, then SO_PEERCRED), sends it nothing (its request
//     carries bob's environment) and starts his kernel itself;
//   - bob's real standby, with a real spare (Debian's ipykernel): alice
//     cannot reach its socket at all, and root, connecting with a request
//     that matches in everything but the uid, is refused; the standby and
//     its spare go, bob's kernel runs on.
func TestSecuritySpareAdoption(t *testing.T) {
	bin := sharedBinary(t)
	alice, bob := newLocalUser(t, "alice"), newLocalUser(t, "bob")
	const bobID = "5b2c1e7a-aaaa-4bbb-8ccc-000000000001" // connFileFor's

	t.Run("planted", func(t *testing.T) {
		for _, owner := range []string{"alice", "bob"} {
			t.Run("file of "+owner, func(t *testing.T) {
				state := bob.mkdir(t, filepath.Join(bob.home, "state-"+owner), 0o700)
				aliceDir := alice.mkdir(t, filepath.Join(alice.home, "sock-"+owner), 0o755)
				heard := filepath.Join(aliceDir, "heard")
				sock := filepath.Join(aliceDir, "s")
				// alice's listener: answers ok to anyone, and writes what it
				// was sent.
				l := exec.Command("/usr/bin/python3", "-c", `
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
open(sys.argv[2] + ".ready", "w").close()
while True:
    c, _ = s.accept()
    c.settimeout(5)
    got = b""
    try:
        c.sendall(b'{"ok":true}\n')
        while True:
            b = c.recv(65536)
            if not b:
                break
            got += b
    except OSError:
        pass
    with open(sys.argv[2], "ab") as f:
        f.write(b"CONNECTION " + got + b"\n")
    c.close()
`, sock, heard)
				l.SysProcAttr = &syscall.SysProcAttr{Credential: alice.credential, Setpgid: true}
				testutil.NoErr(t, l.Start())
				t.Cleanup(func() { syscall.Kill(-l.Process.Pid, syscall.SIGKILL); l.Wait() })
				for i := 0; ; i++ {
					if _, err := os.Stat(heard + ".ready"); err == nil {
						break
					}
					if i == 500 {
						t.Fatal("alice's listener did not start")
					}
					time.Sleep(10 * time.Millisecond)
				}
				// Root moves alice's socket to where bob's run looks.
				at := filepath.Join(state, record.StandbyName(bobID))
				testutil.NoErr(t, os.Rename(sock, at))
				if owner == "bob" {
					os.Lchown(at, bob.uid, bob.gid)
				}
				bobs := startUserSupervisor(t, bin, bob, state, -1, "proc", "exec sleep 600")
				log := bobs.logText()
				t.Logf("bob's run:\n%s", log)
				if strings.Contains(log, "took over") {
					t.Fatalf("bob's run handed his kernel to alice's listener")
				}
				if owner == "bob" && !strings.Contains(log, "refused the standby socket") {
					t.Errorf("bob's run does not say it refused the socket of another user's process")
				}
				heardText, _ := os.ReadFile(heard)
				if bytes.Contains(heardText, []byte("conn_file")) || bytes.Contains(heardText, []byte("HOME=")) {
					t.Errorf("alice's listener was sent bob's request: %q", heardText)
				}
				// His kernel is his run's own child.
				kpid := bobKernelPID(t, state, bobID)
				if p, err := proc.Read(kpid); err != nil || p.PPid != bobs.cmd.Process.Pid {
					t.Errorf("bob's kernel %d is not his run's child (%+v, %v)", kpid, p, err)
				}
				bobs.stop(t, syscall.SIGTERM)
			})
		}
	})

	t.Run("standby", func(t *testing.T) {
		state := bob.mkdir(t, filepath.Join(bob.home, "state-standby"), 0o700)
		conn := connFileFor(t, bob)
		kernel := []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", conn}
		bobs := startUserRun(t, bin, bob, state, -1, "proc", kernel...)
		var sp *record.Spare
		for i := 0; sp == nil; i++ {
			if b, err := os.ReadFile(filepath.Join(state, record.SpareName(bobID))); err == nil {
				var s record.Spare
				if json.Unmarshal(b, &s) == nil && s.PID > 0 {
					sp = &s
				}
			}
			if i == 600 {
				t.Fatalf("bob's supervisor kept no spare within 60 s:\n%s", bobs.logText())
			}
			time.Sleep(100 * time.Millisecond)
		}
		killLater(t, sp.PID)
		killLater(t, sp.StandbyPID)
		at := filepath.Join(state, record.StandbyName(bobID))

		// alice: bob's 0700 directory keeps her out.
		code, out := runAs(t, alice.credential, userEnv(alice), 30*time.Second, "/usr/bin/python3", "-c",
			"import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print('refused', e.errno)\nelse:\n    print('CONNECTED')", at)
		if code != 0 || !strings.Contains(out, "refused") {
			t.Errorf("alice reached bob's standby socket: exit %d %s", code, out)
		}

		// root: a request that matches but for the uid.
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(sp.StandbyPID) + "/environ")
		req, _ := json.Marshal(map[string]any{"conn_file": conn, "argv": kernel,
			"env": strings.Split(strings.TrimRight(string(env), "\x00"), "\x00"), "cwd": "/"})
		c, err := net.DialTimeout("unix", at, 5*time.Second)
		testutil.NoErr(t, err)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(append(req, '\n'))
		reply := make([]byte, 4096)
		n, _ := c.Read(reply)
		c.Close()
		t.Logf("the standby answered root: %s", reply[:n])
		if bytes.Contains(reply[:n], []byte(`"ok":true`)) {
			t.Fatalf("bob's standby took root's request")
		}
		for i := 0; alive(sp.StandbyPID) || alive(sp.PID); i++ {
			if i == 300 {
				t.Fatalf("bob's standby (%d) or spare (%d) still runs 30 s after a refused request", sp.StandbyPID, sp.PID)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if kpid := bobKernelPID(t, state, bobID); !alive(kpid) || !alive(bobs.cmd.Process.Pid) {
			t.Errorf("bob's kernel or supervisor died of the refused request")
		}
		if !strings.Contains(bobs.logText(), "refused a request for the spare kernel") {
			t.Errorf("bob's standby did not log the refusal:\n%s", bobs.logText())
		}
		bobs.stop(t, syscall.SIGTERM)
	})
}

// bobKernelPID is the kernel pid of the record of id in state.
func bobKernelPID(t *testing.T, state, id string) int {
	t.Helper()
	for i := 0; i < 250; i++ {
		var st record.State
		if b, err := os.ReadFile(filepath.Join(state, id+".json")); err == nil && json.Unmarshal(b, &st) == nil && st.KernelPID > 0 {
			return st.KernelPID
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no record of kernel %s in %s", id, state)
	return 0
}
