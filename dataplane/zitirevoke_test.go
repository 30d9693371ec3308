package dataplane

import (
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/testutil"
	"github.com/zmesh/zmesh/internal/zitiproto"
)

// A Connect whose session is deleted while its circuit is being made is refused: an
// OpenZiti host holds its DialSuccess, the dialer's session goes and router E forgets it,
// then the host accepts; the dialer gets StateClosed instead of StateConnected, and what it
// sends on the connection never reaches the host, whose end is closed.
func TestZitiConnectRevokedWhileRouted(t *testing.T) {
	t.Parallel()
	s := newZitiBound(t, false, nil)
	n, svc, e, host, dialer := s.n, s.svc, s.e, s.host, s.dialer
	se := n.knownSession(dialer, e.r, svc.ID, "Dial")
	type connected struct {
		zc    *zconn
		reply *zitiproto.Message
		err   error
	}
	done := make(chan connected, 1)
	go func() {
		zc, reply, err := dialer.connect(se.Token, nil, nil)
		done <- connected{zc, reply, err}
	}()
	var d *zitiproto.Message
	select {
	case d = <-host.dials:
	case <-time.After(testutil.Patience):
		t.Fatal("no dial reached the host")
	}
	if err := n.m.DeleteSession(se.ID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "router E to forget the session", func() bool {
		_, ok := e.r.sessionCache.session(se.Token)
		return !ok
	})
	id, _ := d.Uint32(zitiproto.HeaderRouterProvidedConnID)
	hosted := host.newConn(id)
	if err := host.dialSuccess(d, id); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err == nil {
		res.zc.write([]byte("after the revocation"), 0)
		t.Fatal("a Connect whose session was deleted while it was routed got StateConnected")
	}
	if res.reply == nil || res.reply.ContentType != zitiproto.ContentStateClosed {
		t.Fatalf("the Connect was answered %v, want StateClosed", res.err)
	}
	if code, _ := res.reply.Uint32(zitiproto.HeaderErrorCode); code != zitiproto.ErrorInvalidSession {
		t.Fatalf("refused with error code %d, want %d (invalid session)", code, zitiproto.ErrorInvalidSession)
	}
	// The client's connection id is free at router E, so what it sends there is dropped;
	// the host's end is closed without any data.
	cid, _ := res.reply.Uint32(zitiproto.HeaderConnID)
	stray := &zconn{cl: dialer, id: cid}
	stray.write([]byte("after the revocation"), 0)
	if b, err := hosted.next(); err == nil {
		t.Fatalf("the host got %q from a revoked dialer", b)
	}
}
