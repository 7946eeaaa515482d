// Package relay is the supervisor's relay (docs/design.md#relay-and-transport):
// the five outer sockets Jupyter's clients connect to, bound through
// internal/zmtp, and five inner sockets to the kernel, with a pump per
// direction that copies every frame untouched.
//
// Contract:
//   - Frames pass untouched in both directions; the relay never
//     re-serialises. It reads headers of control and shell messages only.
//   - It acts (reports an Event to the supervisor, remembers a running
//     cell) only on messages whose HMAC verifies with the session key, and
//     on a signed request once: a replayed signature is relayed like any
//     message and ignored (replay.go). Forgeries and replays are logged at
//     most once per interval. The key is never logged.
//   - Messages it sends in its own name (own.go) are signed with the key.
//   - A peer that breaks a rule or stops reading costs only its own
//     connection; that is the transport's job (docs/local-peers.md).
package relay
