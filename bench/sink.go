package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// The first byte a load generator sends on a connection tells the sink what to do with it.
const (
	// modeDiscard: read to EOF, then answer the number of bytes read (8 bytes, big endian)
	// and close. The count lets the load generator check that every byte arrived.
	modeDiscard = 'D'
	// modeEcho: write back every byte read, half-closing on EOF.
	modeEcho = 'E'
)

// echoBufferSize is the buffer an echo connection reads into: a 64-byte round trip or the
// one byte of a circuit setup fits many times over.
const echoBufferSize = 16 << 10

// runSink serves discard and echo connections on listen until ctx ends. Echo connections
// share pooled buffers: the circuit setup measurement opens thousands a second, and a buffer
// allocated for each made the sink the busiest process on the machine after the routers,
// its garbage collection taking CPU from the path being measured.
func runSink(ctx context.Context, listen string, ready func(net.Addr) error, log *slog.Logger) error {
	bufs := sync.Pool{New: func() any { return new([echoBufferSize]byte) }}
	return serve(ctx, listen, ready, func(ctx context.Context, conn net.Conn) {
		if err := sinkConn(conn, &bufs); err != nil && ctx.Err() == nil {
			log.Warn("sink connection failed", "from", conn.RemoteAddr(), "err", err)
		}
	}, log)
}

func sinkConn(conn net.Conn, bufs *sync.Pool) error {
	var mode [1]byte
	if _, err := io.ReadFull(conn, mode[:]); err != nil {
		return fmt.Errorf("read mode: %w", err)
	}
	switch mode[0] {
	case modeDiscard:
		return discard(conn)
	case modeEcho:
		buf := bufs.Get().(*[echoBufferSize]byte)
		defer bufs.Put(buf)
		return echo(conn, buf[:])
	default:
		return fmt.Errorf("unknown mode byte %q", mode[0])
	}
}

func discard(conn net.Conn) error {
	buf := make([]byte, 256<<10)
	var total uint64
	for {
		n, err := conn.Read(buf)
		total += uint64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("discard after %d bytes: %w", total, err)
		}
	}
	var count [8]byte
	binary.BigEndian.PutUint64(count[:], total)
	if _, err := conn.Write(count[:]); err != nil {
		return fmt.Errorf("answer count %d: %w", total, err)
	}
	return nil
}

func echo(conn net.Conn, buf []byte) error {
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return fmt.Errorf("echo: %w", werr)
			}
		}
		if err == io.EOF {
			return closeWrite(conn)
		}
		if err != nil {
			return fmt.Errorf("echo: %w", err)
		}
	}
}
