// Package wrapper is the supervisor behind `tfgpu-kernel run`: it binds the
// five sockets Jupyter asked for, starts the real kernel on a private inner
// connection in a tree of its own, relays every channel byte for byte, and
// owns the kernel's lifecycle (DESIGN §3, §4).
//
// Contract:
//   - Frames pass untouched in both directions; the relay never re-serialises.
//     It reads headers of control and shell messages only, and acts only on
//     messages whose HMAC verifies with the session key. Messages it emits
//     itself (a shutdown_reply the kernel did not send, the notice that the
//     kernel died) are signed with the key. The key is never logged.
//   - One goroutine (supervisor.loop) owns the lifecycle state. Stopping is
//     one ordered function (supervisor.stop): relay shutdown → grace → kill
//     the tree → wait until empty → reply → exit.
//   - SIGINT is forwarded to the kernel's process group and never ends the
//     supervisor. SIGTERM and SIGHUP stop it in order. The death of the
//     process that started it stops it too (parent-death signal plus a
//     check of the parent, see parentGone).
//   - The process is a child subreaper with one reaper (cgroup.Reaper): code
//     here must not call exec.Cmd.Wait or os.Process.Wait.
//
// The outer sockets listen through internal/zmtp, under zmq4: every peer is
// checked there, and a peer that breaks a rule (or stops reading) costs
// only its own connection (docs/local-peers.md). The supervisor acts on a
// signed request once: replayed signatures are ignored (replay.go).
package wrapper
