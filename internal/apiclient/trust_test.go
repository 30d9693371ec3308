package apiclient_test

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrltest"
)

// TestRouterPosingAsControllerRefused: a router's server certificate, enrolled normally and
// naming the controller's address, chains to the network's CA and passes the usual TLS
// checks, yet the client the CLI and the SDK use refuses it as the controller, and still
// accepts the controller.
func TestRouterPosingAsControllerRefused(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	id := c.IdentityFile(t, "alice")
	roots, err := id.Roots()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := id.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	imposter := c.Imposter(t)

	// The threat: the CA and the names alone accept the router.
	conn, err := tls.Dial("tcp", imposter, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("the imposter does not pass the usual TLS checks, so this test shows nothing: %v", err)
	}
	conn.Close()

	_, err = apiclient.New("https://"+imposter, roots, cert).AuthenticateCert(t.Context())
	if !errors.Is(err, certid.ErrNotController) || !strings.Contains(err.Error(), "not the controller's certificate") {
		t.Errorf("authentication at a router posing as the controller: %v; want it refused as not the controller's certificate", err)
	}
	if _, err := apiclient.New(c.URL, roots, cert).AuthenticateCert(t.Context()); err != nil {
		t.Errorf("authentication at the controller: %v", err)
	}
}
