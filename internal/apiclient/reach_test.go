package apiclient

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReachErrors: a controller that cannot be reached is named once, with what to check.
func TestReachErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	untrusted := strings.TrimPrefix(srv.URL, "https://")

	for _, tc := range []struct {
		host, want string
	}{
		{refused, "cannot reach the controller at " + refused + ": nothing listens there: is the controller running, and is that its API address?"},
		{untrusted, "cannot reach the controller at " + untrusted + ": its certificate is not one this client accepts for that address"},
	} {
		_, err := New("https://"+tc.host, x509.NewCertPool(), nil).Do(context.Background(), "GET", ClientAPI+"/version", nil, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Count(err.Error(), tc.host) != 1 {
			t.Errorf("%s: %v, want %q and the address once", tc.host, err, tc.want)
		}
		if _, err := serverLeaf(context.Background(), tc.host); tc.host == refused && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("enrollment's first contact with %s: %v, want %q", tc.host, err, tc.want)
		}
	}
}

// TestErrorAfterConnecting: a connection that ends once made may have carried the request,
// so the error names the call, not an unreachable controller.
func TestErrorAfterConnecting(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	host := ln.Addr().String()
	_, err = New("https://"+host, x509.NewCertPool(), nil).Do(context.Background(), "POST", ClientAPI+"/authenticate", nil, nil)
	want := "POST " + ClientAPI + "/authenticate at " + host + ": "
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "cannot reach") || strings.Count(err.Error(), host) != 1 {
		t.Errorf("%v, want %q and the address once", err, want)
	}
}
