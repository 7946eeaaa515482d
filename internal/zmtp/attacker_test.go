package zmtp

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Attacks by another local user: the test binary, copied where any user
// can run it, runs as a real user made for the test (testutil.NewUser)
// with TFGPU_ZMTP_ATTACK set, and does what a user without the key can do
// to a door's port until its stdin closes; then it prints what it got and
// exits. The doors see a peer of another uid, as a kernel's ports see
// another user of the machine.

func TestMain(m *testing.M) {
	if mode := os.Getenv("TFGPU_ZMTP_ATTACK"); mode != "" {
		os.Exit(attack(mode, os.Args[1:]))
	}
	code := m.Run()
	if attackBinary.path != "" {
		os.RemoveAll(filepath.Dir(attackBinary.path))
	}
	os.Exit(code)
}

// attacker is a running attack process.
type attacker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *testutil.Buffer
	done  chan struct{}
}

var attackBinary struct {
	once sync.Once
	path string
}

// startAttack runs mode with args as user u (another uid than the doors').
func startAttack(t *testing.T, u testutil.User, mode string, args ...string) *attacker {
	t.Helper()
	attackBinary.once.Do(func() {
		exe, err := os.Executable()
		testutil.NoErr(t, err)
		// Kept for the whole test binary: a fresh directory per test would
		// be removed by the first test's cleanup.
		dir, err := os.MkdirTemp("", "tfgpu-attack-")
		testutil.NoErr(t, err)
		os.Chmod(dir, 0o755)
		b, err := os.ReadFile(exe)
		testutil.NoErr(t, err)
		attackBinary.path = dir + "/zmtp.test"
		testutil.NoErr(t, os.WriteFile(attackBinary.path, b, 0o755))
	})
	a := &attacker{out: &testutil.Buffer{}, done: make(chan struct{})}
	a.cmd = exec.Command(attackBinary.path, args...)
	a.cmd.Env = []string{"TFGPU_ZMTP_ATTACK=" + mode, "PATH=/usr/bin:/bin"}
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.Cred, Setpgid: true}
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	var err error
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	testutil.NoErr(t, a.cmd.Start())
	go func() { a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() { a.stop(t) })
	return a
}

// stop ends the attack (stdin closed) and returns what it printed; the
// process is killed if it has not exited within 10 s, and always reaped.
func (a *attacker) stop(t *testing.T) string {
	a.stdin.Close()
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
		t.Errorf("the attack process did not stop; killed. Output:\n%s", a.out.String())
	}
	return a.out.String()
}

// attack is the attack process's main: mode's goroutines run until stdin
// closes, then it prints its counters as "name value" lines.
func attack(mode string, args []string) int {
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	var ctr counters
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	addr := args[0]
	switch mode {
	case "fill": // addr conns size: unfinished messages declaring size, all but a byte sent, reconnecting
		conns, _ := strconv.Atoi(args[1])
		size, _ := strconv.Atoi(args[2])
		for range conns {
			run(func() { fillLoop(addr, size, stop, &ctr) })
		}
	case "claim": // addr identity: claim the identity again and again; report anything routed to it
		run(func() { claimLoop(addr, []byte(args[1]), stop, &ctr) })
	case "slowsub": // addr bytes-per-second: subscribe to everything, read at that rate
		rate, _ := strconv.Atoi(args[1])
		run(func() { slowSub(addr, rate, stop, &ctr) })
	case "flood": // addr conns: connections that complete the handshake and idle
		conns, _ := strconv.Atoi(args[1])
		for range conns {
			run(func() { idleLoop(addr, true, stop, &ctr) })
		}
	case "chaos": // addr seed identity: every attack above at once, and more
		seed, _ := strconv.ParseUint(args[1], 10, 64)
		chaos(addr, seed, []byte(args[2]), stop, &ctr, run)
	default:
		fmt.Println("unknown mode", mode)
		return 2
	}
	<-stop
	wg.Wait()
	ctr.print()
	return 0
}

type counters struct{ m sync.Map }

func (c *counters) add(name string, n int64) {
	v, _ := c.m.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
}

func (c *counters) print() {
	c.m.Range(func(k, v any) bool {
		fmt.Printf("%s %d\n", k, v.(*atomic.Int64).Load())
		return true
	})
}

// attackCount reads a counter from an attack's output (0 when absent).
func attackCount(out, name string) int64 {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func stopped(stop chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// dialShake connects and handshakes as socketType with identity; nil on
// failure.
func dialShake(addr, socketType string, identity []byte) (net.Conn, *bufio.Reader) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, nil
	}
	if _, err := c.Write(AppendReady(AppendGreeting(nil, false), socketType, identity)); err != nil {
		c.Close()
		return nil, nil
	}
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	g := make([]byte, GreetingLen)
	if _, err := io.ReadFull(r, g); err != nil {
		c.Close()
		return nil, nil
	}
	if h, err := readFrameHeader(r); err != nil || !h.Command() {
		c.Close()
		return nil, nil
	} else if _, err := r.Discard(int(h.Size)); err != nil {
		c.Close()
		return nil, nil
	}
	c.SetReadDeadline(time.Time{})
	return c, r
}

// closeOnStop closes c when stop closes or done does.
func closeOnStop(c net.Conn, stop, done chan struct{}) {
	go func() {
		select {
		case <-stop:
		case <-done:
		}
		c.Close()
	}()
}

// reconnecting runs use on a connection (handshaken as a DEALER when
// shake is set) again and again until stop closes; a refused connection is
// counted and retried shortly.
func reconnecting(addr string, shake bool, stop chan struct{}, ctr *counters, use func(c net.Conn, r *bufio.Reader)) {
	for !stopped(stop) {
		var c net.Conn
		var r *bufio.Reader
		if shake {
			c, r = dialShake(addr, "DEALER", nil)
		} else if nc, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			c, r = nc, bufio.NewReader(nc)
		}
		if c == nil {
			ctr.add("refused", 1)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		done := make(chan struct{})
		closeOnStop(c, stop, done)
		use(c, r)
		close(done)
	}
}

func fillLoop(addr string, size int, stop chan struct{}, ctr *counters) {
	body := make([]byte, 256<<10)
	reconnecting(addr, true, stop, ctr, func(c net.Conn, _ *bufio.Reader) {
		ok := func() bool {
			if _, err := c.Write(AppendFrameHeader(nil, 0, size)); err != nil {
				return false
			}
			for left := size - 1; left > 0; {
				n, err := c.Write(body[:min(left, len(body))])
				if err != nil {
					return false
				}
				left -= n
				ctr.add("bytes_sent", int64(n))
			}
			return true
		}()
		if ok {
			ctr.add("held", 1)
			io.Copy(io.Discard, c) // hold it until the door closes it
		}
		ctr.add("closed", 1)
	})
}

func claimLoop(addr string, id []byte, stop chan struct{}, ctr *counters) {
	for !stopped(stop) {
		c, r := dialShake(addr, "DEALER", id)
		if c == nil {
			ctr.add("refused", 1)
			continue // hammer: the race is the attack
		}
		done := make(chan struct{})
		closeOnStop(c, stop, done)
		// The door answers the handshake before it judges the claim: a
		// refused claim is closed at once, an accepted one stays.
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		for first := true; ; first = false {
			h, err := readFrameHeader(r)
			if ne, ok := err.(net.Error); ok && ne.Timeout() && first {
				ctr.add("claimed", 1)
				c.SetReadDeadline(time.Time{})
				continue
			}
			if err != nil {
				if first {
					ctr.add("refused", 1)
				}
				break
			}
			if _, err := r.Discard(int(h.Size)); err != nil {
				break
			}
			if !h.Command() {
				ctr.add("got", 1) // a frame routed to the claimed identity
			}
		}
		close(done)
	}
}

func slowSub(addr string, rate int, stop chan struct{}, ctr *counters) {
	c, r := dialShake(addr, "SUB", nil)
	if c == nil {
		ctr.add("refused", 1)
		return
	}
	done := make(chan struct{})
	defer close(done)
	closeOnStop(c, stop, done)
	c.Write(message([]byte("\x01")))
	buf := make([]byte, max(rate/20, 1))
	for !stopped(stop) {
		n, err := io.ReadFull(r, buf)
		ctr.add("bytes", int64(n))
		if err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // rate bytes a second, never stalled for long
	}
}

func idleLoop(addr string, shake bool, stop chan struct{}, ctr *counters) {
	reconnecting(addr, shake, stop, ctr, func(c net.Conn, _ *bufio.Reader) {
		io.Copy(io.Discard, c)
		ctr.add("closed", 1)
	})
}

// chaos runs many adversarial connections at once, chosen by seed: budget
// fillers, tricklers, identity claimers, silent handshakes, idle
// connections, garbage.
func chaos(addr string, seed uint64, id []byte, stop chan struct{}, ctr *counters, run func(func())) {
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for range 2 + rng.IntN(3) {
		size := (4 + rng.IntN(12)) << 20
		run(func() { fillLoop(addr, size, stop, ctr) })
	}
	for range 1 + rng.IntN(2) {
		run(func() { claimLoop(addr, id, stop, ctr) })
	}
	for range 4 + rng.IntN(8) {
		run(func() { idleLoop(addr, rng.IntN(2) == 0, stop, ctr) })
	}
	for range 2 + rng.IntN(3) {
		s := rng.Uint64()
		run(func() { trickle(addr, s, stop, ctr) })
	}
}

// trickle sends a message's frames a few bytes at a time with pauses, or
// garbage, or a multi-frame message that never ends.
func trickle(addr string, seed uint64, stop chan struct{}, ctr *counters) {
	rng := mrand.New(mrand.NewPCG(seed, 1))
	reconnecting(addr, true, stop, ctr, func(c net.Conn, _ *bufio.Reader) {
		var b []byte
		switch rng.IntN(3) {
		case 0:
			b = AppendFrameHeader(nil, 0, 1<<20)
			b = append(b, make([]byte, 1000)...)
		case 1:
			b = message([]byte("a"), []byte("b"))
			b[0] |= FlagMore // never ends
			b = b[:len(b)-3]
		default:
			b = make([]byte, 64)
			rand.Read(b)
		}
		for len(b) > 0 && !stopped(stop) {
			n := min(len(b), 1+rng.IntN(8))
			if _, err := c.Write(b[:n]); err != nil {
				break
			}
			b = b[n:]
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		io.Copy(io.Discard, c)
		ctr.add("trickle_closed", 1)
	})
}

// randomID is a routing identity as jupyter_client makes one (a session
// UUID).
func randomID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
