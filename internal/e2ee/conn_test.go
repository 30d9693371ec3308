package e2ee

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

var bothCiphers = []Cipher{CipherAES256GCM, CipherChaCha20Poly1305}

// TestRoundTripTCP moves large random data both ways at once over loopback TCP, written in
// writes of random sizes and read in reads of random sizes, and compares digests.
func TestRoundTripTCP(t *testing.T) {
	for _, cipher := range bothCiphers {
		t.Run(cipher.String(), func(t *testing.T) {
			ccfg, scfg := configs(t)
			ccfg.Cipher = cipher
			cc, sc := tcpPair(t)
			client, server := mustHandshake(t, cc, sc, ccfg, scfg)
			if client.Cipher() != cipher || server.Cipher() != cipher {
				t.Fatalf("ciphers: client %v, server %v, want %v", client.Cipher(), server.Cipher(), cipher)
			}

			const size = 8<<20 + 12345
			up, down := randomBytes(t, size), randomBytes(t, size)
			errs := make(chan error, 2)
			go func() { errs <- sendInPieces(client, up) }()
			go func() { errs <- sendInPieces(server, down) }()
			gotUp, errUp := readInPieces(server)
			gotDown, errDown := readInPieces(client)
			// Read errors first: a failing test must not wait for writers that nobody reads.
			if errUp != nil || errDown != nil {
				t.Fatalf("server read: %v; client read: %v", errUp, errDown)
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if sha256.Sum256(gotUp) != sha256.Sum256(up) || sha256.Sum256(gotDown) != sha256.Sum256(down) {
				t.Fatalf("data differ: sent %d and %d bytes, received %d and %d", len(up), len(down), len(gotUp), len(gotDown))
			}
		})
	}
}

// sendInPieces writes b in writes of random sizes, some far above RecordSize, then half-closes.
func sendInPieces(c *Conn, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), 1+mrand.IntN(4*RecordSize+RecordSize/2))
		if mrand.IntN(8) == 0 {
			n = min(len(b), 1<<20)
		}
		if _, err := c.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return c.CloseWrite()
}

// readInPieces reads to io.EOF with buffers of random sizes, some below a record's.
func readInPieces(c *Conn) ([]byte, error) {
	var got []byte
	buf := make([]byte, 3*RecordSize)
	for {
		n, err := c.Read(buf[:1+mrand.IntN(len(buf))])
		got = append(got, buf[:n]...)
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
	}
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHalfClose: the client sends a request and half-closes; the server reads it to io.EOF,
// then answers on its still open direction.
func TestHalfClose(t *testing.T) {
	ccfg, scfg := configs(t)
	cc, sc := tcpPair(t)
	client, server := mustHandshake(t, cc, sc, ccfg, scfg)

	if _, err := client.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("more")); err == nil {
		t.Fatal("Write after CloseWrite succeeded")
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatalf("second CloseWrite: %v", err)
	}
	req, err := io.ReadAll(server)
	if err != nil || string(req) != "request" {
		t.Fatalf("server read %q, %v", req, err)
	}
	if n, err := server.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read after EOF: %d, %v", n, err)
	}
	// The underlying TCP connection is half-closed too.
	if n, err := sc.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("underlying Read after close-write: %d, %v", n, err)
	}

	if _, err := server.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if err := server.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := io.ReadAll(client)
	if err != nil || string(resp) != "response" {
		t.Fatalf("client read %q, %v", resp, err)
	}
}

// TestCloseSendsCloseWrite: a peer that Closes ends the stream cleanly, not as a truncation.
func TestCloseSendsCloseWrite(t *testing.T) {
	ccfg, scfg := configs(t)
	cc, sc := tcpPair(t)
	client, server := mustHandshake(t, cc, sc, ccfg, scfg)
	client.Write([]byte("bye"))
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(server); err != nil || string(got) != "bye" {
		t.Fatalf("server read %q, %v", got, err)
	}
	if _, err := client.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
}

// TestReadTimeoutIsRetryable: a read deadline interrupts Read without breaking the Conn.
func TestReadTimeoutIsRetryable(t *testing.T) {
	ccfg, scfg := configs(t)
	cc, sc := tcpPair(t)
	client, server := mustHandshake(t, cc, sc, ccfg, scfg)
	server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := server.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read: %v, want a timeout", err)
	}
	server.SetReadDeadline(time.Time{})
	client.Write([]byte("late"))
	buf := make([]byte, 10)
	if n, err := server.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("Read after timeout: %q, %v", buf[:n], err)
	}
}

// TestSequenceExhaustion: the last sequence number is never used; the Conn fails instead.
func TestSequenceExhaustion(t *testing.T) {
	ccfg, scfg := configs(t)
	cc, sc := tcpPair(t)
	client, server := mustHandshake(t, cc, sc, ccfg, scfg)
	client.out.seq, server.in.seq = math.MaxUint64-1, math.MaxUint64-1
	if _, err := client.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if n, err := server.Read(buf); err != nil || string(buf[:n]) != "last" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}
	if _, err := client.Write([]byte("one too many")); err == nil {
		t.Fatal("Write past the last sequence number succeeded")
	}
	if _, err := client.Write([]byte("again")); err == nil {
		t.Fatal("the Conn did not stay failed")
	}
}

// TestRecordLayout checks the record layout Write produces for a buffer much
// larger than a record: full records, then the rest.
func TestRecordLayout(t *testing.T) {
	ccfg, scfg := configs(t)
	cc, sc := tcpPair(t)
	client, _ := mustHandshake(t, cc, sc, ccfg, scfg)
	const size = 3*RecordSize + 100
	done := make(chan []byte)
	go func() {
		b := make([]byte, 3*(headerLen+RecordSize+tagSize)+headerLen+100+tagSize)
		io.ReadFull(sc, b)
		done <- b
	}()
	if n, err := client.Write(bytes.Repeat([]byte{'x'}, size)); n != size || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	wire := <-done
	for i, want := range []int{RecordSize, RecordSize, RecordSize, 100} {
		if wire[0] != recordData || int(wire[1])<<16|int(wire[2])<<8|int(wire[3]) != want+tagSize {
			t.Fatalf("record %d: header % x, want data of %d bytes", i, wire[:headerLen], want)
		}
		wire = wire[headerLen+want+tagSize:]
	}
}

// TestSteadyStateAllocs: once its buffers have grown, a Conn moves data in both modes
// without allocating.
func TestSteadyStateAllocs(t *testing.T) {
	for _, datagram := range []bool{false, true} {
		t.Run(fmt.Sprint("datagram=", datagram), func(t *testing.T) {
			ccfg, scfg := configs(t)
			ccfg.Datagram, scfg.Datagram = datagram, datagram
			cc, sc := net.Pipe()
			client, server := mustHandshake(t, cc, sc, ccfg, scfg)
			data := make([]byte, 1<<20)
			if datagram {
				data = data[:1400]
			}
			go func() {
				buf := make([]byte, 64<<10)
				for {
					if _, err := server.Read(buf); err != nil {
						return
					}
				}
			}()
			client.Write(data) // grows the buffers
			if allocs := testing.AllocsPerRun(20, func() { client.Write(data) }); allocs != 0 {
				t.Fatalf("%v allocations per %d-byte Write and its Reads", allocs, len(data))
			}
		})
	}
}

// TestBuffersFollowTheRecords: a Conn carrying small records keeps small buffers (a short or
// idle circuit costs little memory), and grows them when a large write comes, carrying it
// whole.
func TestBuffersFollowTheRecords(t *testing.T) {
	t.Parallel()
	ccfg, scfg := configs(t)
	cc, sc := tcpPair(t)
	client, server := mustHandshake(t, cc, sc, ccfg, scfg)
	buf := make([]byte, 100)
	for range 10 {
		if _, err := client.Write([]byte("small")); err != nil {
			t.Fatal(err)
		}
		if n, err := server.Read(buf); err != nil || string(buf[:n]) != "small" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
	}
	if len(server.rbuf) > minReadBuffer || cap(client.wbuf) > 256 {
		t.Fatalf("after small records: read buffer %d bytes (want at most %d), write buffer %d (want at most 256)", len(server.rbuf), minReadBuffer, cap(client.wbuf))
	}
	large := make([]byte, 3*RecordSize+5)
	for i := range large {
		large[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() { _, err := client.Write(large); wrote <- err }()
	got := make([]byte, len(large))
	if _, err := io.ReadFull(server, got); err != nil || !bytes.Equal(got, large) {
		t.Fatalf("the large write arrived altered (%v)", err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if len(server.rbuf) < maxRecordLen {
		t.Fatalf("the read buffer is %d bytes after full records", len(server.rbuf))
	}
}
