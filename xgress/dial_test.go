package xgress

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestDialPoolQueueFullFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := NewDialPool(ctx, DialPoolOptions{QueueLength: 1, Workers: 1, Dwell: time.Second})
	results := make(chan error, 3)
	req := DialRequest{Binding: BindingProxy, Address: "127.0.0.1:1", Done: func(c net.Conn, err error) { results <- err }}
	if err := p.Submit(req); err != nil {
		t.Fatal(err)
	}
	// Wait until the worker holds the first request, so that the queue has room for one.
	for {
		if _, busy := p.Load(); busy == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := p.Submit(req); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := p.Submit(req)
	if !errors.Is(err, ErrDialQueueFull) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("third submit: %v after %s", err, time.Since(start))
	}
	if queued, busy := p.Load(); queued != 1 || busy != 1 {
		t.Fatalf("load %d queued, %d busy", queued, busy)
	}
	// Stopping the pool fails what is queued rather than leaving it hanging.
	cancel()
	for range 2 {
		select {
		case err := <-results:
			if err == nil {
				t.Fatal("a dial to a closed port succeeded")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a queued dial was never answered")
		}
	}
}

func TestDialBindings(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := NewDialPool(ctx, DialPoolOptions{QueueLength: 4, Workers: 2})
	dial := func(binding, addr string) (net.Conn, error) {
		ch := make(chan struct {
			c   net.Conn
			err error
		}, 1)
		if err := p.Submit(DialRequest{Binding: binding, Address: addr, Done: func(c net.Conn, err error) {
			ch <- struct {
				c   net.Conn
				err error
			}{c, err}
		}}); err != nil {
			return nil, err
		}
		r := <-ch
		return r.c, r.err
	}
	for _, tc := range []struct{ binding, addr, errPart string }{
		{BindingProxy, ln.Addr().String(), ""},
		{BindingTransport, "tcp:" + ln.Addr().String(), ""},
		{BindingTransport, "udp:" + ln.Addr().String(), "allowed: tls, tcp"},
		{BindingTransport, "no-transport", "not <transport>:<host>:<port>"},
		{"edge", ln.Addr().String(), "allowed: proxy, proxy_udp, transport, transport_udp"},
	} {
		c, err := dial(tc.binding, tc.addr)
		if tc.errPart == "" {
			if err != nil {
				t.Errorf("%s %s: %v", tc.binding, tc.addr, err)
				continue
			}
			buf := make([]byte, 2)
			if _, err := c.Read(buf); err != nil || string(buf) != "hi" {
				t.Errorf("%s: read %q %v", tc.binding, buf, err)
			}
			c.Close()
		} else if err == nil || !strings.Contains(err.Error(), tc.errPart) {
			t.Errorf("%s %s: %v", tc.binding, tc.addr, err)
		}
	}
	// UDP: a datagram reaches a UDP server.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c, err := dial(BindingProxyUDP, pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("datagram"))
	buf := make([]byte, 64)
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := pc.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "datagram" {
		t.Fatalf("udp: %q %v", buf[:n], err)
	}
}
