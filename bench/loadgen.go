package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// drainTimeout bounds the wait, after a stream stops sending, for the sink's byte count.
const drainTimeout = 30 * time.Second

// Stream is what one throughput connection delivered: bytes the sink confirmed, and the time
// from the common start until its confirmation arrived.
type Stream struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	Gbps    float64 `json:"gbps"`
}

// runThroughput opens streams connections to addr in discard mode, then sends writeSize-byte
// writes on all of them for d. Each stream then half-closes and waits for the sink's count of
// the bytes it received, which must equal the bytes sent: a stream's throughput is what
// arrived over the time until it had all arrived.
func runThroughput(ctx context.Context, c *connector, streams int, d time.Duration, writeSize int) ([]Stream, error) {
	conns, err := dialAll(ctx, c, streams, modeDiscard)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	buf := make([]byte, writeSize)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	out := make([]Stream, streams)
	errs := make([]error, streams)
	start := time.Now()
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Go(func() {
			out[i], errs[i] = push(ctx, conn, buf, start, start.Add(d), drainTimeout)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("stream %d of %d to %s: %w", i+1, streams, c.target, errs[i])
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// push writes buf on conn until deadline, half-closes and reads the sink's byte count. A
// write still blocked stall after the deadline fails the stream.
func push(ctx context.Context, conn loadConn, buf []byte, start, deadline time.Time, stall time.Duration) (Stream, error) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	// The loop ends on the clock, not on a write deadline: a deadline that expires mid-write
	// breaks a TLS or end-to-end encrypted connection for good. A write blocked on a stalled
	// path would never return, so a watchdog closes the connection.
	watchdog := time.AfterFunc(time.Until(deadline)+stall, func() { conn.Close() })
	var sent int64
	for time.Now().Before(deadline) {
		n, err := conn.Write(buf)
		sent += int64(n)
		if err != nil {
			if !watchdog.Stop() {
				return Stream{}, fmt.Errorf("the path stalled: a write was blocked %s after the deadline, %d bytes sent: %w", stall, sent, err)
			}
			return Stream{}, fmt.Errorf("write after %d bytes: %w", sent, orCtx(ctx, err))
		}
	}
	if !watchdog.Stop() {
		return Stream{}, fmt.Errorf("the path stalled: a write was blocked %s after the deadline, %d bytes sent", stall, sent)
	}
	if err := conn.CloseWrite(); err != nil {
		return Stream{}, fmt.Errorf("half-close: %w", orCtx(ctx, err))
	}
	if err := conn.SetReadDeadline(time.Now().Add(drainTimeout)); err != nil {
		return Stream{}, fmt.Errorf("set deadline: %w", err)
	}
	var count [8]byte
	if _, err := io.ReadFull(conn, count[:]); err != nil {
		return Stream{}, fmt.Errorf("read the sink's count of %d bytes sent: %w", sent, orCtx(ctx, err))
	}
	elapsed := time.Since(start).Seconds()
	if got := int64(binary.BigEndian.Uint64(count[:])); got != sent {
		return Stream{}, fmt.Errorf("the sink received %d bytes of %d sent", got, sent)
	}
	return Stream{Bytes: sent, Seconds: elapsed, Gbps: gbps(sent, elapsed)}, nil
}

// runEcho times size-byte round trips over conns echo connections to addr, samples in all,
// taking at most d once each connection is warm: its first round trips warm it up (the
// path may set itself up on the first byte, e.g. a relay's TLS handshake to the next hop),
// are not counted, and are bounded by circuitTimeout rather than d.
func runEcho(ctx context.Context, c *connector, conns, samples int, d time.Duration, size int) (Latency, error) {
	cs, err := dialAll(ctx, c, conns, modeEcho)
	if err != nil {
		return Latency{}, err
	}
	defer closeAll(cs)
	per := make([][]time.Duration, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i, conn := range cs {
		n := samples / conns
		if i < samples%conns {
			n++
		}
		wg.Go(func() {
			per[i], errs[i] = roundTrips(ctx, conn, n, size, d)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("echo connection %d of %d to %s: %w", i+1, conns, c.target, errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Latency{}, err
	}
	var all []time.Duration
	for _, p := range per {
		all = append(all, p...)
	}
	if len(all) == 0 {
		return Latency{}, fmt.Errorf("echo to %s: no round trip completed within %s after the warm-up", c.target, d)
	}
	return summarize(all), nil
}

// roundTrips sends n timed requests on conn, each awaiting its complete echo, for at most
// d; before them, min(n, 100) untimed ones within circuitTimeout.
func roundTrips(ctx context.Context, conn loadConn, n, size int, d time.Duration) ([]time.Duration, error) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	warmup := min(n, 100)
	deadline := time.Now().Add(circuitTimeout) // for the warm-up, then for the samples
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("set deadline: %w", err)
	}
	req, resp := make([]byte, size), make([]byte, size)
	samples := make([]time.Duration, 0, n)
	for i := 0; i < warmup+n && time.Now().Before(deadline); i++ {
		if i == warmup {
			deadline = time.Now().Add(d)
			if err := conn.SetDeadline(deadline.Add(drainTimeout)); err != nil {
				return nil, fmt.Errorf("set deadline: %w", err)
			}
		}
		binary.BigEndian.PutUint64(req[:min(8, size)], uint64(i))
		t := time.Now()
		if _, err := conn.Write(req); err != nil {
			return nil, fmt.Errorf("write request %d: %w", i, orCtx(ctx, err))
		}
		if _, err := io.ReadFull(conn, resp); err != nil {
			return nil, fmt.Errorf("read response %d: %w", i, orCtx(ctx, err))
		}
		rtt := time.Since(t)
		if !bytes.Equal(req, resp) {
			return nil, fmt.Errorf("response %d differs from its request", i)
		}
		if i >= warmup {
			samples = append(samples, rtt)
		}
	}
	return samples, nil
}

// dialAll opens n connections through c and sends mode on each.
func dialAll(ctx context.Context, c *connector, n int, mode byte) ([]loadConn, error) {
	conns := make([]loadConn, 0, n)
	for range n {
		conn, err := c.dial(ctx)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("dial %s: %w", c.target, err)
		}
		conns = append(conns, conn)
		if _, err := conn.Write([]byte{mode}); err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("send mode to %s: %w", c.target, err)
		}
	}
	return conns, nil
}

func closeAll(conns []loadConn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// orCtx prefers the context's error when ctx has ended, since the connection error it caused
// says less.
func orCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
