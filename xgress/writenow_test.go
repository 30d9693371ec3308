package xgress

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"

	"github.com/zmesh/zmesh/internal/socketpair"
	"github.com/zmesh/zmesh/internal/testutil"
)

// unixPair returns the two ends of a Unix socket pair, closed when the test ends: a write to
// one is in the other's receive queue when it returns.
func unixPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	a, b, err := socketpair.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// unixTerminator returns a started terminator of circuit 7 on a Unix socket pair, its
// connection, the service's end and the recorder of the frames it sends.
func unixTerminator(t *testing.T) (e *Endpoint, conn, service net.Conn, rec *recorder) {
	t.Helper()
	conn, service = unixPair(t)
	rec = &recorder{}
	e = NewEndpoint(7, Terminator, conn, rec, NewPool(), nil)
	t.Cleanup(func() { e.Close("") })
	e.Start()
	return e, conn, service, rec
}

// readNow reads what c holds without waiting.
func readNow(t *testing.T, c net.Conn, p []byte) int {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var rerr error
	raw.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), p, syscall.MSG_DONTWAIT)
		return true
	})
	if errors.Is(rerr, syscall.EAGAIN) {
		return 0
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	return n
}

// payload gives e a payload of circuit 7 from the initiator.
func payload(e *Endpoint, seq uint64, data []byte, flags uint8) {
	f := e.pool.Get(len(data))
	f.Type, f.Origin, f.Circuit, f.Seq, f.Flags = Payload, Initiator, 7, seq, flags
	f.SetData(data)
	e.Receive(f)
}

// TestSmallPayloadWrittenByReceive: a small payload that finds no writer running is in the
// service's socket when Receive returns, without a writer goroutine; its acknowledgement
// waits until ackAfter bytes are owed, or the end of the stream.
func TestSmallPayloadWrittenByReceive(t *testing.T) {
	t.Parallel()
	e, _, service, rec := unixTerminator(t)

	buf := make([]byte, 2*maxWriteNow)
	var seq uint64
	for range ackAfter / maxWriteNow {
		msg := bytes.Repeat([]byte{byte(seq)}, maxWriteNow)
		payload(e, seq, msg, 0)
		seq += uint64(len(msg))
		if n := readNow(t, service, buf); !bytes.Equal(buf[:n], msg) {
			t.Fatalf("after Receive of payload %d the service holds %d bytes, want its %d", seq, n, len(msg))
		}
		if acks := rec.acks(); seq < ackAfter && len(acks) > 0 {
			t.Fatalf("acks %v after %d bytes, want none before %d", acks, seq, ackAfter)
		}
	}
	testutil.Eventually(t, "the ack of the owed bytes", func() bool { return slices.Equal(rec.acks(), []uint64{ackAfter}) })
	waitStopped(e) // the writer that sent it

	payload(e, seq, []byte("tail"), 0)
	payload(e, seq+4, nil, FlagEOF)
	if n := readNow(t, service, buf); string(buf[:n]) != "tail" {
		t.Fatalf("the service holds %q, want tail", buf[:n])
	}
	want := []uint64{ackAfter, ackAfter + 4}
	testutil.Eventually(t, "the EOF's batch acknowledges the tail", func() bool { return slices.Equal(rec.acks(), want) })
	if n, err := service.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("the service read %d bytes, %v; want EOF", n, err)
	}
}

// TestWriteNowLeavesTheRestToTheWriter: a small payload whose connection takes none of it
// (the socket is full) or a part of it at once is finished by the writer, in order, and
// acknowledged at the other end's EOF, not before (fewer than ackAfter bytes are owed).
func TestWriteNowLeavesTheRestToTheWriter(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"full", "half"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e, conn, service, rec := unixTerminator(t)
			msg := bytes.Repeat([]byte("0123456789abcdef"), maxWriteNow/16)

			filler := 0
			switch how {
			case "full": // as earlier payloads would leave it
				raw, err := conn.(syscall.Conn).SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				chunk := make([]byte, 1024)
				for _, size := range []int{len(chunk), 1} {
					for full := false; !full; {
						raw.Write(func(fd uintptr) bool {
							n, err := syscall.Write(int(fd), chunk[:size])
							filler += max(n, 0)
							full = err != nil
							return true
						})
					}
				}
			case "half": // the connection takes half of the payload at once
				e.tryWrite = func(fd uintptr) bool {
					e.nowN, _ = syscall.Write(int(fd), e.nowData[:len(e.nowData)/2])
					return true
				}
			}

			payload(e, 0, msg, 0)
			e.mu.Lock()
			delivered := e.delivered
			e.mu.Unlock()
			if how == "half" && delivered < uint64(len(msg)/2) {
				t.Fatalf("Receive wrote %d bytes itself, want %d", delivered, len(msg)/2)
			}
			got := make([]byte, filler+len(msg))
			if _, err := io.ReadFull(service, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[filler:], msg) {
				t.Fatalf("the service read %q after the filler, want the payload", got[filler:])
			}
			testutil.Eventually(t, "the writer stops", func() bool {
				e.mu.Lock()
				defer e.mu.Unlock()
				return !e.state.writing()
			})
			if acks := rec.acks(); len(acks) > 0 {
				t.Fatalf("acks %v for %d bytes, want none before %d are owed or the EOF", acks, len(msg), ackAfter)
			}
			payload(e, uint64(len(msg)), nil, FlagEOF)
			testutil.Eventually(t, "the writer acknowledges the payload at the EOF", func() bool {
				return slices.Equal(rec.acks(), []uint64{uint64(len(msg))})
			})
		})
	}
}

// TestWriterAcksOnceAckAfterOwed: over a connection that cannot write without waiting (the
// router's SDK streams), small payloads go through the writer, whose acknowledgement waits,
// as writeNow's does, until ackAfter bytes are owed; the rest is acknowledged at the EOF.
func TestWriterAcksOnceAckAfterOwed(t *testing.T) {
	t.Parallel()
	conn, service := unixPair(t)
	rec := &recorder{}
	e := NewEndpoint(7, Terminator, struct{ net.Conn }{conn}, rec, NewPool(), nil) // hides the socket
	t.Cleanup(func() { e.Close("") })
	e.Start()

	buf := make([]byte, maxWriteNow)
	var seq uint64
	for seq < ackAfter+maxWriteNow {
		msg := bytes.Repeat([]byte{byte(seq)}, maxWriteNow)
		payload(e, seq, msg, 0)
		seq += uint64(len(msg))
		if _, err := io.ReadFull(service, buf); err != nil || !bytes.Equal(buf, msg) {
			t.Fatalf("the service read %q, %v; want payload %d", buf[:8], err, seq)
		}
		if seq == ackAfter {
			testutil.Eventually(t, "the ack of the owed bytes", func() bool { return slices.Equal(rec.acks(), []uint64{ackAfter}) })
		}
		testutil.Eventually(t, "the writer stops", func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return !e.state.writing()
		})
		if acks := rec.acks(); seq < ackAfter && len(acks) > 0 {
			t.Fatalf("acks %v after %d bytes, want none before %d", acks, seq, ackAfter)
		}
	}
	if acks := rec.acks(); !slices.Equal(acks, []uint64{ackAfter}) {
		t.Fatalf("acks %v after %d bytes, want one, at %d", acks, seq, ackAfter)
	}
	payload(e, seq, nil, FlagEOF)
	testutil.Eventually(t, "the ack of the rest at the EOF", func() bool { return slices.Equal(rec.acks(), []uint64{ackAfter, seq}) })
}
