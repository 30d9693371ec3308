package tlscork

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zmesh/zmesh/controlplane/pki"
)

// pair returns the two ends of a TLS 1.3 connection on loopback, each over a Conn, with
// certificates of the project's PKI.
func pair(t *testing.T) (client, server *tls.Conn, cc, sc *Conn) {
	t.Helper()
	ca, err := pki.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCert(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c.(*net.TCPConn)
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc, sc = New(raw.(*net.TCPConn), nil, 0), New(<-accepted, nil, 0)
	t.Cleanup(func() { cc.Close(); sc.Close() })
	client = tls.Client(cc, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	server = tls.Server(sc, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	done := make(chan error, 1)
	go func() { done <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return client, server, cc, sc
}

// segmentsOut is the kernel's count of segments c sent.
func segmentsOut(t *testing.T, c *net.TCPConn) uint32 {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n uint32
	var infoErr error
	raw.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		if info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); infoErr == nil {
			n = info.Segs_out
		}
	})
	if infoErr != nil {
		t.Fatal(infoErr)
	}
	return n
}

// TestBatchedWritesOnce: the records of one Write leave together (on loopback, whose
// segments hold 64 KiB, a 48 KiB Write is one segment rather than one per 16 KiB record),
// and the peer reads every byte through its read-ahead buffer.
func TestBatchedWritesOnce(t *testing.T) {
	client, server, cc, sc := pair(t)
	cc.SetNoDelay(true)
	sc.ReadAhead(256 << 10)
	data := make([]byte, 48<<10)
	rand.Read(data)
	got := make(chan []byte, 2)
	go func() {
		for range 2 {
			b := make([]byte, len(data))
			if _, err := io.ReadFull(server, b); err != nil {
				t.Error(err)
			}
			got <- b
		}
	}()
	count := func(w io.Writer) uint32 {
		before := segmentsOut(t, cc.TCP())
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if b := <-got; !bytes.Equal(b, data) {
			t.Fatal("the peer read other bytes")
		}
		return segmentsOut(t, cc.TCP()) - before
	}
	plain := count(client)
	batched := count(NewBatched(client, cc, 256<<10))
	if plain < 3 || batched > 2 {
		t.Fatalf("a 48 KiB write left in %d segments plain, %d batched; want a segment per record plain, at most 2 batched", plain, batched)
	}
}

// TestBatchedConcurrentWrites: Writes from several goroutines, and the pooled buffers they
// borrow, keep every record whole: the peer reads each writer's stream intact.
func TestBatchedConcurrentWrites(t *testing.T) {
	client, server, cc, sc := pair(t)
	var pool sync.Pool
	cc.pool, cc.poolSize = &pool, 64<<10
	sc.ReadAhead(64 << 10)
	b := NewBatched(client, cc, 64<<10)
	const writers, chunk, chunks = 4, 40 << 10, 64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			p := bytes.Repeat([]byte{byte('a' + w)}, chunk)
			for range chunks {
				if _, err := b.Write(p); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); client.CloseWrite() }()
	all, err := io.ReadAll(server)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != writers*chunk*chunks {
		t.Fatalf("read %d bytes, want %d", len(all), writers*chunk*chunks)
	}
	// Each Write is whole: every chunk-sized run holds one writer's byte.
	for off := 0; off < len(all); off += chunk {
		run := all[off : off+chunk]
		if !bytes.Equal(run, bytes.Repeat(run[:1], chunk)) {
			t.Fatalf("the Write at %d was interleaved with another (sha256 %x)", off, sha256.Sum256(run))
		}
	}
}
