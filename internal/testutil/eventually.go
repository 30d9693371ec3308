package testutil

import (
	"testing"
	"time"
)

// Patience is how long Eventually and EventuallyNil wait for their condition: generous,
// since a loaded machine (the race detector, parallel packages, a busy CI runner) can stall
// a test for seconds, and a condition that holds is seen within a poll of holding.
const Patience = 30 * time.Second

// poll is how often a condition is checked.
const poll = 10 * time.Millisecond

// Eventually checks cond every few milliseconds until it holds, and fails the test saying
// what was awaited when it still does not after Patience.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not the case after %v", what, Patience)
		}
		time.Sleep(poll)
	}
}

// EventuallyNil calls f every few milliseconds until it returns nil, and fails the test
// with what was awaited and f's last error when it still does not after Patience.
func EventuallyNil(t testing.TB, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, Patience, err)
		}
		time.Sleep(poll)
	}
}
