package e2ee

import (
	"io"
	"net"
	"testing"
)

// BenchmarkStream moves data one way in 1 MiB writes, read in 64 KiB reads, over loopback
// TCP and over net.Pipe, for each cipher and for the bare transport as a baseline. An op is
// one 1 MiB write (64 records) delivered to the reader.
func BenchmarkStream(b *testing.B) {
	transports := []struct {
		name string
		pair func(testing.TB) (net.Conn, net.Conn)
	}{
		{"tcp", tcpPair},
		{"pipe", func(tb testing.TB) (net.Conn, net.Conn) {
			c, s := net.Pipe()
			tb.Cleanup(func() { c.Close(); s.Close() })
			return c, s
		}},
	}
	for _, transport := range transports {
		for _, cipher := range append([]Cipher{CipherAuto}, bothCiphers...) {
			name := cipher.String()
			if cipher == CipherAuto {
				name = "plaintext"
			}
			b.Run(transport.name+"/"+name, func(b *testing.B) {
				cc, sc := transport.pair(b)
				var writer io.WriteCloser = cc
				var reader io.Reader = sc
				if cipher != CipherAuto {
					ccfg, scfg := configs(b)
					ccfg.Cipher = cipher
					client, server := mustHandshake(b, cc, sc, ccfg, scfg)
					writer, reader = closeWriter{client}, server
				}
				benchmarkOneWay(b, writer, reader)
			})
		}
	}
}

type closeWriter struct{ *Conn }

func (c closeWriter) Close() error { return c.CloseWrite() }

func benchmarkOneWay(b *testing.B, w io.WriteCloser, r io.Reader) {
	const size = 1 << 20
	data := make([]byte, size)
	done := make(chan int64)
	go func() {
		buf := make([]byte, 64<<10)
		var total int64
		for {
			n, err := r.Read(buf)
			total += int64(n)
			if err != nil {
				done <- total
				return
			}
		}
	}()
	// A first write grows the buffers of both ends to their bulk size.
	if _, err := w.Write(data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := w.Write(data); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	if total := <-done; total != int64(b.N+1)*size {
		b.Fatalf("read %d bytes, want %d", total, int64(b.N+1)*size)
	}
}

// BenchmarkDatagram sends 1400-byte datagrams one way over net.Pipe.
func BenchmarkDatagram(b *testing.B) {
	for _, cipher := range bothCiphers {
		b.Run(cipher.String(), func(b *testing.B) {
			ccfg, scfg := configs(b)
			ccfg.Cipher, ccfg.Datagram, scfg.Datagram = cipher, true, true
			cc, sc := net.Pipe()
			client, server := mustHandshake(b, cc, sc, ccfg, scfg)
			data := make([]byte, 1400)
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, 2048)
				for {
					if _, err := server.Read(buf); err != nil {
						return
					}
				}
			}()
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := client.Write(data); err != nil {
					b.Fatal(err)
				}
			}
			client.CloseWrite()
			<-done
		})
	}
}
