package dataplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/tlscork"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// zitiTLSPair returns the two ends of a TLS connection over loopback TCP: the router's, as
// its listener makes it, and the client's.
func zitiTLSPair(b testing.TB) (*tlscork.Batched, *tls.Conn) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var pool sync.Pool
	accepted := make(chan *tlscork.Batched, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		cc := tlscork.New(c.(*net.TCPConn), &pool, 128<<10)
		s := tlscork.NewBatched(tls.Server(cc, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}), cc, 128<<10)
		if s.Handshake() != nil {
			s = nil
		}
		accepted <- s
	}()
	client, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		b.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		b.Fatal("the TLS handshake failed")
	}
	b.Cleanup(func() { client.Close(); server.Close() })
	return server, client
}

// BenchmarkZitiData is the Data path of one OpenZiti client connection, each way per op: the
// client's Data message is read by the channel's reader, queued and read from the circuit's
// end; the end's Write goes out as a Data message the client reads. Over TLS, as the edge
// listener runs it, and over plain TCP, which leaves the router's own code alone (crypto/tls
// allocates per record read), unframed and framed (OpenZiti's e2ee on the circuit).
func BenchmarkZitiData(b *testing.B) {
	b.Run("tls", func(b *testing.B) {
		server, client := zitiTLSPair(b)
		server.ReadAhead(64 << 10)
		benchZitiData(b, server, client, false)
	})
	for _, framed := range []bool{false, true} {
		name := "tcp"
		if framed {
			name = "tcp-framed"
		}
		b.Run(name, func(b *testing.B) {
			client, server := tcpPair(b)
			benchZitiData(b, server, client, framed)
		})
	}
}

// benchZitiData runs the ops of BenchmarkZitiData; on a framed circuit the end reads and
// writes each Data body as a frame.
func benchZitiData(b *testing.B, server, client net.Conn, framed bool) {
	r := &Router{log: slog.New(slog.DiscardHandler)}
	s := newZitiServer(r)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx, zc := s.newConn(ctx, server, "identity", "fingerprint")
	zc.log = r.log
	c := newZitiCircuit(zc, 1, framed)
	zc.addCircuit(c)
	go zc.run(ctx, zitiproto.NewReader(server, nil))
	defer zc.close()

	payload := make([]byte, 32<<10)
	buf := make([]byte, len(payload))
	if framed {
		buf = make([]byte, 4+len(payload))
	}
	w, rd := zitiproto.NewWriter(client), zitiproto.NewReader(client, nil)
	var out, in zitiproto.Message
	b.SetBytes(2 * int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		out.SetState(zitiproto.ContentData, 1, "")
		out.Body = payload
		if err := w.Write(&out); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := rd.Read(&in); err != nil || len(in.Body) != len(payload) {
			b.Fatalf("%d bytes back (%v)", len(in.Body), err)
		}
	}
}
