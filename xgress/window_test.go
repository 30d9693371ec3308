package xgress

import (
	"fmt"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
)

// fill has the sender take the whole window and reports how many bytes it took.
func fill(w *window) int {
	n := w.acquire(1, int(MaxWindow))
	w.recordSent(n)
	return n
}

// waitBlocked waits until the sender has run out of window and is waiting.
func waitBlocked(t *testing.T, w *window) {
	t.Helper()
	testutil.Eventually(t, "the sender waits for its window", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.blocked.IsZero()
	})
}

// ackAll acknowledges every byte sent.
func ackAll(w *window) {
	_, sent, _ := w.state()
	w.ack(sent)
}

// TestWindowGrowsOnQuickAcks: a sender that used up its window and is acknowledged quickly
// gets a window twice as large, up to MaxWindow; acknowledged slowly, it keeps its window.
func TestWindowGrowsOnQuickAcks(t *testing.T) {
	t.Parallel()
	w := newWindow()
	w.growWithin = time.Minute // "quickly", however loaded the machine
	for want := uint64(InitialWindow); ; want = min(2*want, MaxWindow) {
		if size, _, _ := w.state(); size != want {
			t.Fatalf("window %d, want %d", size, want)
		}
		if want == MaxWindow {
			break
		}
		fill(w)
		done := make(chan int)
		go func() { done <- w.acquire(1, 1) }()
		waitBlocked(t, w)
		ackAll(w)
		if n := <-done; n != 1 {
			t.Fatalf("acquire after the ack: %d", n)
		}
		w.recordSent(1)
		ackAll(w)
	}

	w = newWindow()
	w.growWithin = 0 // every ack is slow
	fill(w)
	done := make(chan int)
	go func() { done <- w.acquire(1, 1) }()
	waitBlocked(t, w)
	ackAll(w)
	<-done
	if size, _, _ := w.state(); size != InitialWindow {
		t.Fatalf("after a slow ack the window is %d, want %d", size, InitialWindow)
	}
}

// TestWindowShrinksOnStall: a sender left without an ack for the stall time finds its window
// halved; an ack lets it send again; each later stall halves it again, never below
// MinWindow.
func TestWindowShrinksOnStall(t *testing.T) {
	t.Parallel()
	w := newWindow()
	w.stallAfter = 20 * time.Millisecond
	want := uint64(InitialWindow)
	for range 4 { // 256 KiB, 128, 64, and 64 again
		fill(w)
		done := make(chan int)
		go func() { done <- w.acquire(1, 1) }()
		waitBlocked(t, w)
		next := max(want/2, MinWindow)
		testutil.Eventually(t, fmt.Sprintf("a stall halves the window of %d", want), func() bool {
			size, _, _ := w.state()
			if size != want && size != next {
				t.Fatalf("stalled with a window of %d: it became %d, want %d", want, size, next)
			}
			return size == next
		})
		time.Sleep(3 * w.stallAfter) // a further halving during the same wait would show
		if size, _, _ := w.state(); size != next {
			t.Fatalf("one stall took the window from %d to %d, want %d", want, size, next)
		}
		want = next
		ackAll(w)
		if n := <-done; n != 1 {
			t.Fatalf("acquire after the ack: %d", n)
		}
		w.recordSent(1)
		ackAll(w)
	}
}

// TestWindowCloseWakesSender: closing the window ends a sender's wait with 0.
func TestWindowCloseWakesSender(t *testing.T) {
	t.Parallel()
	w := newWindow()
	fill(w)
	done := make(chan int)
	go func() { done <- w.acquire(1, 1) }()
	waitBlocked(t, w)
	w.close()
	select {
	case n := <-done:
		if n != 0 {
			t.Fatalf("acquire on a closed window: %d, want 0", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close did not wake the waiting sender")
	}
}

// TestWindowWaitAllocatesNothing: a sender that waits for an ack on every payload allocates
// nothing (the stall timer is made once). Each run is 10 waits: testing.AllocsPerRun counts
// whole allocations per run, so one allocation in 10 waits shows.
func TestWindowWaitAllocatesNothing(t *testing.T) {
	w := newWindow()
	acks := make(chan uint64)
	go func() {
		for seq := range acks {
			time.Sleep(10 * time.Microsecond) // the sender is waiting, most likely
			w.ack(seq)
		}
	}()
	defer close(acks)
	allocs := testing.AllocsPerRun(50, func() {
		for range 10 {
			n := w.acquire(int(MinWindow), int(MaxWindow))
			w.recordSent(n)
			_, sent, _ := w.state()
			acks <- sent
		}
	})
	if allocs != 0 {
		t.Fatalf("%.0f allocations per 10 payloads that waited for their window, want 0", allocs)
	}
}

// BenchmarkWindow is a sender that runs out of window on every payload and an acknowledger
// that frees it: waiting for an ack allocates nothing.
func BenchmarkWindow(b *testing.B) {
	w := newWindow()
	acks := make(chan uint64, 1)
	go func() {
		for seq := range acks {
			w.ack(seq)
		}
	}()
	defer close(acks)
	b.ReportAllocs()
	for b.Loop() {
		n := w.acquire(int(MinWindow), int(MaxWindow)) // waits for the ack of the last payload
		w.recordSent(n)
		_, sent, _ := w.state()
		acks <- sent
	}
}
