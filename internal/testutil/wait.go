package testutil

import (
	"testing"
	"time"
)

// WaitFor waits until cond holds: the event a test waits for, polled
// every few milliseconds, within a bound (within) that only a failure
// reaches. A test asserts on what it waited for, never after a sleep.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
	}
}
