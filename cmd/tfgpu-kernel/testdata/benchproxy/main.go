// Command benchproxy is the floor under the relay's cost, the third
// kernel of BenchmarkKernel (bench.py's "floor"): it starts the kernel on free ports of its own and
// copies bytes between each of the five ports Jupyter asked for and the
// kernel's, with nothing else (no ZMTP, no checks, splice(2) where Go uses
// it). Whatever it costs against the direct kernel, any relay process
// costs at least that on the same machine.
//
//	benchproxy CONNECTION_FILE KERNEL_ARGV...
//
// An argument of KERNEL_ARGV equal to CONNECTION_FILE is replaced by the
// kernel's own connection file. The proxy exits with the kernel.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

var ports = []string{"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchproxy:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: benchproxy CONNECTION_FILE KERNEL_ARGV...")
	}
	connFile := args[0]
	b, err := os.ReadFile(connFile)
	if err != nil {
		return err
	}
	var ci map[string]any
	if err := json.Unmarshal(b, &ci); err != nil {
		return err
	}
	if ci["transport"] != "tcp" {
		return fmt.Errorf("transport %v: only tcp", ci["transport"])
	}
	ip, _ := ci["ip"].(string)
	inner := map[string]any{}
	for k, v := range ci {
		inner[k] = v
	}
	var lns []net.Listener
	for _, p := range ports {
		port, _ := ci[p].(float64)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(int(port))))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		lns = append(lns, ln)
		if inner[p], err = innerPort(); err != nil {
			return err
		}
	}
	inner["ip"] = "127.0.0.1"
	dir, err := os.MkdirTemp("", "benchproxy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	innerFile := filepath.Join(dir, "kernel.json")
	ib, _ := json.Marshal(inner)
	if err := os.WriteFile(innerFile, ib, 0o600); err != nil {
		return err
	}
	argv := append([]string(nil), args[1:]...)
	for i, a := range argv {
		if a == connFile {
			argv[i] = innerFile
		}
	}
	for i, ln := range lns {
		target := net.JoinHostPort("127.0.0.1", fmt.Sprint(inner[ports[i]]))
		go serve(ln, target)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for sig := range sigc {
			_ = syscall.Kill(-cmd.Process.Pid, sig.(syscall.Signal))
		}
	}()
	_ = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the kernel's children
	return nil
}

// innerPort is a free port for the kernel, below the ephemeral range: a
// port taken from that range (port 0) and closed again for the kernel to
// bind could be any outgoing connection's local port, or another :0
// listener's, by then (a CI run failed so: the kernel's bind found it in
// use). Below it only a process that picks its port by number can collide.
func innerPort() (int, error) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &lo)
	}
	for range 1000 {
		if lo <= 10001 {
			break
		}
		port := 10000 + rand.IntN(lo-10000)
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(port))); err == nil {
			ln.Close()
			return port, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// serve copies bytes both ways between each client of ln and its own
// connection to target, dialled until the kernel is up.
func serve(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var k net.Conn
			for tries := 0; ; tries++ {
				if k, err = net.Dial("tcp", target); err == nil {
					break
				}
				if tries == 3000 { // a minute: the kernel never came up
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			defer k.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(k, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, k); done <- struct{}{} }()
			<-done
		}()
	}
}
