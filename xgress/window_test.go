package xgress

import (
	"testing"
	"time"
)

// fill has the sender take the whole window and reports how many bytes it took.
func fill(w *window) int {
	n := w.acquire(1, int(MaxWindow))
	w.sentBytes(n)
	return n
}

// TestWindowGrowsOnQuickAcks: a sender that used up its window and is acknowledged at once
// gets a window twice as large, up to MaxWindow.
func TestWindowGrowsOnQuickAcks(t *testing.T) {
	t.Parallel()
	w := newWindow()
	for want := uint64(InitialWindow); ; want = min(2*want, MaxWindow) {
		if size, _, _ := w.state(); size != want {
			t.Fatalf("window %d, want %d", size, want)
		}
		if want == MaxWindow {
			break
		}
		fill(w)
		go func() {
			time.Sleep(time.Millisecond) // the sender is waiting by now, most likely
			_, sent, _ := w.state()
			w.ack(sent)
		}()
		if n := w.acquire(1, 1); n != 1 {
			t.Fatalf("acquire after the ack: %d", n)
		}
	}
}

// TestWindowShrinksOnStall: a sender left without an ack for StallTimeout finds its window
// halved; an ack then lets it send again, and the next stall halves it again, not below
// MinWindow.
func TestWindowShrinksOnStall(t *testing.T) {
	t.Parallel()
	w := newWindow()
	want := uint64(InitialWindow)
	for range 2 {
		fill(w)
		done := make(chan int)
		go func() { done <- w.acquire(1, 1) }()
		time.Sleep(StallTimeout + StallTimeout/2)
		want = max(want/2, MinWindow)
		if size, _, _ := w.state(); size != want {
			t.Fatalf("after a stall the window is %d, want %d", size, want)
		}
		_, sent, _ := w.state()
		w.ack(sent)
		if n := <-done; n != 1 {
			t.Fatalf("acquire after the ack: %d", n)
		}
		w.sentBytes(1)
	}
}

// TestWindowCloseWakesSender: closing the window ends a sender's wait with 0.
func TestWindowCloseWakesSender(t *testing.T) {
	t.Parallel()
	w := newWindow()
	fill(w)
	done := make(chan int)
	go func() { done <- w.acquire(1, 1) }()
	time.Sleep(10 * time.Millisecond)
	w.close()
	select {
	case n := <-done:
		if n != 0 {
			t.Fatalf("acquire on a closed window: %d, want 0", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close did not wake the waiting sender")
	}
}

// TestWindowWaitAllocatesNothing: a sender that waits for an ack on every payload allocates
// nothing (the stall timer is made once).
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
	allocs := testing.AllocsPerRun(200, func() {
		n := w.acquire(int(MinWindow), int(MaxWindow))
		w.sentBytes(n)
		_, sent, _ := w.state()
		acks <- sent
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per payload that waited for its window, want 0", allocs)
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
		w.sentBytes(n)
		_, sent, _ := w.state()
		acks <- sent
	}
}
