package e2ee

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// relay is a router on the path: it forwards what the client and the server send each other,
// one frame (stream mode) or message (datagram mode) at a time, passing each through an edit
// function, and records everything.
type relay struct {
	client, server net.Conn // the ends to run Client and Server on

	mu       sync.Mutex
	captured []byte
}

// editFunc gets the i-th frame or message of one direction (counting the two handshake
// messages of that direction) and returns what to send instead.
type editFunc func(i int, frame []byte) [][]byte

func startRelay(t testing.TB, datagram bool, clientToServer, serverToClient editFunc) *relay {
	clientEnd, fromClient := net.Pipe()
	toServer, serverEnd := net.Pipe()
	r := &relay{client: clientEnd, server: serverEnd}
	go r.pump(fromClient, toServer, datagram, clientToServer)
	go r.pump(toServer, fromClient, datagram, serverToClient)
	t.Cleanup(func() { clientEnd.Close(); serverEnd.Close() })
	return r
}

// pump forwards src to dst until either fails, then closes both.
func (r *relay) pump(src, dst net.Conn, datagram bool, edit editFunc) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 1<<17)
	for i := 0; ; i++ {
		var frame []byte
		if datagram {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			frame = append([]byte(nil), buf[:n]...)
		} else {
			header := make([]byte, headerLen)
			if _, err := io.ReadFull(src, header); err != nil {
				return
			}
			frame = append(header, make([]byte, int(header[1])<<16|int(header[2])<<8|int(header[3]))...)
			if _, err := io.ReadFull(src, frame[headerLen:]); err != nil {
				return
			}
		}
		r.mu.Lock()
		r.captured = append(r.captured, frame...)
		r.mu.Unlock()
		out := [][]byte{frame}
		if edit != nil {
			out = edit(i, frame)
		}
		for _, f := range out {
			if _, err := dst.Write(f); err != nil {
				return
			}
		}
	}
}

func (r *relay) capturedBytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.captured)
}

// onRecords returns an editFunc that forwards the handshake and lets edit see the records,
// numbered from 0, with the one before (nil for record 0).
func onRecords(edit func(i int, record, previous []byte) [][]byte) editFunc {
	var previous []byte
	return func(i int, frame []byte) [][]byte {
		if i < 2 {
			return [][]byte{frame}
		}
		out := edit(i-2, frame, previous)
		previous = frame
		return out
	}
}

// recordPayload is what the client sends in the middlebox tests: six records, each
// distinguishable, then close-write.
func recordPayload() []byte {
	var b []byte
	for i := range 6 {
		b = append(b, bytes.Repeat([]byte{byte('a' + i)}, RecordSize)...)
	}
	return b
}

func TestMiddleboxStream(t *testing.T) {
	flipAt := func(offset int) func(int, []byte, []byte) [][]byte {
		return func(i int, rec, _ []byte) [][]byte {
			if i == 2 {
				rec[offset] ^= 0x04
			}
			return [][]byte{rec}
		}
	}
	for _, tc := range []struct {
		name string
		edit func(i int, record, previous []byte) [][]byte
		want error
	}{
		{"unchanged", func(_ int, rec, _ []byte) [][]byte { return [][]byte{rec} }, nil},
		{"flip ciphertext bit", flipAt(headerLen + 100), ErrAuthentication},
		{"flip tag bit", flipAt(headerLen + RecordSize + 3), ErrAuthentication},
		{"flip type bit", flipAt(0), ErrAuthentication},
		{"drop record", func(i int, rec, _ []byte) [][]byte {
			if i == 2 {
				return nil
			}
			return [][]byte{rec}
		}, ErrAuthentication},
		{"drop last data record", func(i int, rec, _ []byte) [][]byte {
			if i == 5 {
				return nil
			}
			return [][]byte{rec}
		}, ErrAuthentication},
		{"duplicate record", func(i int, rec, _ []byte) [][]byte {
			if i == 2 {
				return [][]byte{rec, rec}
			}
			return [][]byte{rec}
		}, ErrAuthentication},
		{"replay old record later", func(i int, rec, previous []byte) [][]byte {
			if i == 4 {
				return [][]byte{rec, previous}
			}
			return [][]byte{rec}
		}, ErrAuthentication},
		{"swap records", func(i int, rec, previous []byte) [][]byte {
			switch i {
			case 2:
				return nil // held back, sent after the next one
			case 3:
				return [][]byte{rec, previous}
			}
			return [][]byte{rec}
		}, ErrAuthentication},
		{"drop close-write", func(_ int, rec, _ []byte) [][]byte {
			if rec[0] == recordCloseWrite {
				return nil
			}
			return [][]byte{rec}
		}, io.ErrUnexpectedEOF},
		{"cut a record short", func(i int, rec, _ []byte) [][]byte {
			if i == 5 {
				return [][]byte{rec[:len(rec)/2]}
			}
			if i > 5 {
				return nil
			}
			return [][]byte{rec}
		}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRelay(t, false, onRecords(tc.edit), nil)
			ccfg, scfg := configs(t)
			client, server := mustHandshake(t, r.client, r.server, ccfg, scfg)
			sent := recordPayload()
			go func() {
				client.Write(sent)
				client.CloseWrite()
				client.Close() // ends the client-to-server pump, so that a truncation shows
			}()
			got, err := io.ReadAll(server)
			if tc.want == nil {
				if err != nil || !bytes.Equal(got, sent) {
					t.Fatalf("read %d bytes, %v; want the %d sent", len(got), err, len(sent))
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("read %d bytes, then %v; want %v", len(got), err, tc.want)
			}
			if !bytes.HasPrefix(sent, got) {
				t.Fatal("the server returned data that was not sent")
			}
			if errors.Is(err, ErrAuthentication) {
				if _, again := server.Read(make([]byte, 10)); !errors.Is(again, ErrAuthentication) {
					t.Fatalf("the Conn recovered: %v", again)
				}
			}
			t.Logf("after %d bytes: %v", len(got), err)
		})
	}
}

// TestMiddleboxServerToClient: tampering in the server-to-client direction is caught too.
func TestMiddleboxServerToClient(t *testing.T) {
	r := startRelay(t, false, nil, onRecords(func(i int, rec, _ []byte) [][]byte {
		rec[len(rec)-1] ^= 1
		return [][]byte{rec}
	}))
	ccfg, scfg := configs(t)
	client, server := mustHandshake(t, r.client, r.server, ccfg, scfg)
	go server.Write([]byte("answer"))
	if _, err := client.Read(make([]byte, 10)); !errors.Is(err, ErrAuthentication) {
		t.Fatalf("client Read: %v", err)
	}
}

// TestMiddleboxSeesNoPlaintext: a router recording the circuit finds neither direction's
// data in it.
func TestMiddleboxSeesNoPlaintext(t *testing.T) {
	for _, cipher := range bothCiphers {
		t.Run(cipher.String(), func(t *testing.T) {
			r := startRelay(t, false, nil, nil)
			ccfg, scfg := configs(t)
			ccfg.Cipher = cipher
			client, server := mustHandshake(t, r.client, r.server, ccfg, scfg)
			request := bytes.Repeat([]byte("SECRET-REQUEST-MARKER "), 5000)
			response := bytes.Repeat([]byte("SECRET-RESPONSE-MARKER "), 5000)
			go func() {
				client.Write(request)
				client.CloseWrite()
			}()
			if got, err := io.ReadAll(server); err != nil || !bytes.Equal(got, request) {
				t.Fatalf("server read %d bytes, %v", len(got), err)
			}
			go func() {
				server.Write(response)
				server.CloseWrite()
			}()
			if got, err := io.ReadAll(client); err != nil || !bytes.Equal(got, response) {
				t.Fatalf("client read %d bytes, %v", len(got), err)
			}
			captured := r.capturedBytes()
			if len(captured) < len(request)+len(response) {
				t.Fatalf("captured only %d bytes", len(captured))
			}
			for _, marker := range []string{"SECRET-REQUEST-MARKER", "SECRET-RESPONSE-MARKER", "SECRET"} {
				if bytes.Contains(captured, []byte(marker)) {
					t.Fatalf("the relay saw %q", marker)
				}
			}
		})
	}
}

// TestDatagramRoundTrip: each Write arrives as one Read of the same size, over a pipe that
// keeps message boundaries, with both ciphers; oversized writes fail without harm.
func TestDatagramRoundTrip(t *testing.T) {
	for _, cipher := range bothCiphers {
		t.Run(cipher.String(), func(t *testing.T) {
			ccfg, scfg := configs(t)
			ccfg.Cipher, ccfg.Datagram, scfg.Datagram = cipher, true, true
			cc, sc := net.Pipe()
			client, server := mustHandshake(t, cc, sc, ccfg, scfg)

			if _, err := client.Write(make([]byte, DefaultMaxDatagram+1)); err == nil {
				t.Fatal("oversized datagram accepted")
			}
			sizes := []int{1, 0, 1200, 7, DefaultMaxDatagram, 100}
			go func() {
				for i, n := range sizes {
					client.Write(bytes.Repeat([]byte{byte(i)}, n))
				}
				client.CloseWrite()
			}()
			buf := make([]byte, 70000)
			for i, n := range sizes {
				got, err := server.Read(buf)
				if err != nil || got != n || !bytes.Equal(buf[:got], bytes.Repeat([]byte{byte(i)}, n)) {
					t.Fatalf("datagram %d: read %d bytes, %v; want %d", i, got, err, n)
				}
			}
			if _, err := server.Read(buf); err != io.EOF {
				t.Fatalf("after close-write: %v", err)
			}

			// The other way, into a buffer too small for the datagram.
			go server.Write([]byte("0123456789"))
			small := make([]byte, 4)
			if n, err := client.Read(small); n != 4 || !errors.Is(err, io.ErrShortBuffer) || string(small) != "0123" {
				t.Fatalf("short read: %d %q, %v", n, small, err)
			}
		})
	}
}

// TestDatagramUDP runs datagram mode over real loopback UDP sockets.
func TestDatagramUDP(t *testing.T) {
	a, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.DialUDP("udp", nil, a.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	serverSide := &udpPeer{UDPConn: a, peer: b.LocalAddr().(*net.UDPAddr)}
	ccfg, scfg := configs(t)
	ccfg.Datagram, scfg.Datagram = true, true
	ccfg.MaxDatagram, scfg.MaxDatagram = 1400, 1400
	client, server := mustHandshake(t, b, serverSide, ccfg, scfg)
	buf := make([]byte, 2000)
	for i := range 50 { // ping-pong, so that nothing queues up to be dropped
		msg := fmt.Appendf(nil, "datagram %d", i)
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		n, err := server.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("server read %q, %v", buf[:n], err)
		}
		if _, err := server.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		if n, err = client.Read(buf); err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("client read %q, %v", buf[:n], err)
		}
	}
}

// udpPeer is an unconnected UDP socket that talks to one peer, as a net.Conn.
type udpPeer struct {
	*net.UDPConn
	peer *net.UDPAddr
}

func (u *udpPeer) Write(b []byte) (int, error) { return u.WriteToUDP(b, u.peer) }

func (u *udpPeer) RemoteAddr() net.Addr { return u.peer }

func TestMiddleboxDatagram(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(i int, msg, previous []byte) [][]byte
		want []int // the datagrams the server reads, then (if any left) ErrAuthentication
	}{
		{"flip ciphertext bit", func(i int, msg, _ []byte) [][]byte {
			if i == 2 {
				msg[datagramHeaderLen+3] ^= 0x80
			}
			return [][]byte{msg}
		}, []int{0, 1}},
		{"flip sequence bit", func(i int, msg, _ []byte) [][]byte {
			if i == 2 {
				msg[datagramHeaderLen-1] ^= 0x08
			}
			return [][]byte{msg}
		}, []int{0, 1}},
		{"drop is tolerated", func(i int, msg, _ []byte) [][]byte {
			if i == 2 {
				return nil
			}
			return [][]byte{msg}
		}, []int{0, 1, 3, 4}},
		{"duplicate", func(i int, msg, _ []byte) [][]byte {
			if i == 2 {
				return [][]byte{msg, msg}
			}
			return [][]byte{msg}
		}, []int{0, 1, 2}},
		{"swap", func(i int, msg, previous []byte) [][]byte {
			switch i {
			case 2:
				return nil
			case 3:
				return [][]byte{msg, previous}
			}
			return [][]byte{msg}
		}, []int{0, 1, 3}},
		{"forged sequence number", func(i int, msg, _ []byte) [][]byte {
			if i == 2 {
				binary.BigEndian.PutUint64(msg[1:], 1000)
			}
			return [][]byte{msg}
		}, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRelay(t, true, onRecords(tc.edit), nil)
			ccfg, scfg := configs(t)
			ccfg.Datagram, scfg.Datagram = true, true
			client, server := mustHandshake(t, r.client, r.server, ccfg, scfg)
			go func() {
				for i := range 5 {
					client.Write(fmt.Appendf(nil, "datagram %d", i))
				}
			}()
			buf := make([]byte, 1<<16)
			for _, want := range tc.want {
				n, err := server.Read(buf)
				if err != nil || string(buf[:n]) != fmt.Sprintf("datagram %d", want) {
					t.Fatalf("read %q, %v; want datagram %d", buf[:n], err, want)
				}
			}
			if len(tc.want) < 4 {
				if _, err := server.Read(buf); !errors.Is(err, ErrAuthentication) {
					t.Fatalf("read: %v; want ErrAuthentication", err)
				}
			}
		})
	}
}
