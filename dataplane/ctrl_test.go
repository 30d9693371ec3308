package dataplane

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrlproto"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/link"
)

// TestCtrlDialRefusesRouterAsController: the control channel's dial refuses a router's
// server certificate naming the controller's address, though it chains to the network's CA,
// and connects to the controller.
func TestCtrlDialRefusesRouterAsController(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	r := ctrltest.EnrollRouter(t, c.Model, "r1", "127.0.0.1")
	cc := newCtrlClient(config.Ctrl{}, link.NewCertificates(r.Client, r.Server), c.Ctrl.CA().Pool(), func() *ctrlproto.Hello { return &ctrlproto.Hello{} },
		func(*ctrlproto.Channel) {}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))

	conn, err := cc.dialTLS(t.Context(), c.Imposter(t))
	if err == nil {
		conn.Close()
	}
	if !errors.Is(err, certid.ErrNotController) || !strings.Contains(err.Error(), "not the controller's certificate") {
		t.Errorf("control channel dial to a router posing as the controller: %v; want it refused as not the controller's certificate", err)
	}
	conn, err = cc.dialTLS(t.Context(), c.CtrlAddr)
	if err != nil {
		t.Fatalf("control channel dial to the controller: %v", err)
	}
	conn.Close()
}
