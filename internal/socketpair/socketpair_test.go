package socketpair

import (
	"io"
	"net"
	"testing"
)

// TestHalfClose: bytes cross both ways, and CloseWrite on one end is EOF at the other while
// the other direction still carries data.
func TestHalfClose(t *testing.T) {
	a, b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	go func() {
		a.Write([]byte("question"))
		a.(interface{ CloseWrite() error }).CloseWrite()
	}()
	q, err := io.ReadAll(b)
	if err != nil || string(q) != "question" {
		t.Fatalf("read %q, %v", q, err)
	}
	if _, err := b.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	b.(*net.UnixConn).CloseWrite()
	ans, err := io.ReadAll(a)
	if err != nil || string(ans) != "answer" {
		t.Fatalf("read %q, %v", ans, err)
	}
}
