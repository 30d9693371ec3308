package main

import (
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// zmesh fabric list shows routers, services, terminators, links and circuits from the
// fabric API with the session of zmesh edge login; delete circuit names an unknown circuit.
func TestFabricCommands(t *testing.T) {
	t.Parallel()
	c := ctrltest.Start(t)
	session := filepath.Join(t.TempDir(), "session.json")
	fabric := func(args ...string) (string, error) { // standard output, then standard error
		out, errOut, err := run(t, nil, append([]string{"fabric", "--session-file", session}, args...)...)
		return out + errOut, err
	}
	if _, err := fabric("list", "routers"); err == nil || !strings.Contains(err.Error(), "not logged in") {
		t.Fatalf("list before login: %v", err)
	}
	if _, _, err := run(t, nil, "edge", "--session-file", session, "login", c.URL, "-u", "admin", "-p", "admin-pass", "--yes"); err != nil {
		t.Fatal(err)
	}
	r := &model.EdgeRouter{Name: "far-router"}
	if err := c.Model.CreateEdgeRouter(r); err != nil {
		t.Fatal(err)
	}
	sv := &model.Service{Name: "far-service"}
	if err := c.Model.CreateService(sv); err != nil {
		t.Fatal(err)
	}
	term := &model.Terminator{ServiceID: sv.ID, RouterID: r.ID, Binding: "transport", Address: "tcp:127.0.0.1:9"}
	if err := c.Model.CreateTerminator(term); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"list", "routers"}, []string{"ONLINE", "far-router", r.ID, "false", "(1 of 1 shown)"}},
		{[]string{"list", "services", `name = "far-service"`}, []string{"TERMINATOR STRATEGY", "far-service", "(1 of 1 shown)"}},
		{[]string{"list", "terminators"}, []string{term.ID, "far-service", "far-router", "transport", "tcp:127.0.0.1:9"}},
		{[]string{"list", "links"}, []string{"LATENCY", "(0 of 0 shown)"}},
		{[]string{"list", "circuits"}, []string{"PATH", "(0 of 0 shown)"}},
	} {
		out, err := fabric(tc.args...)
		if err != nil {
			t.Errorf("fabric %v: %v", tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("fabric %v lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	out, err := fabric("-o", "json", "list", "routers")
	if err != nil {
		t.Fatalf("fabric -o json list routers: %v", err)
	}
	if routers := decodeList(t, "fabric -o json list routers", out); len(routers) != 1 || routers[0]["connected"] != false {
		t.Errorf("fabric -o json list routers: %s", out)
	}
	if _, err := fabric("delete", "circuit", "12345"); err == nil || !strings.Contains(err.Error(), "no circuit 12345") {
		t.Errorf("delete an unknown circuit: %v", err)
	}
	if _, err := fabric("list", "widgets"); err == nil || !strings.Contains(err.Error(), "allowed: routers, links, circuits") {
		t.Errorf("list an unknown type: %v", err)
	}
}

// checkFabricCircuit holds a connection through a tunnel's proxy port at proxyAddr, finds its
// circuit with zmesh fabric list circuits (service, path), ends it with zmesh fabric delete
// circuit and expects the connection to close.
func checkFabricCircuit(t *testing.T, session, proxyAddr, service, router string) {
	t.Helper()
	fabric := func(args ...string) (string, error) {
		out, _, err := run(t, nil, append([]string{"fabric", "--session-file", session}, args...)...)
		return out, err
	}
	conn, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var circuits []struct {
		ID      string `json:"id"`
		Service struct {
			Name string `json:"name"`
		} `json:"service"`
	}
	testutil.Eventually(t, "the held connection's circuit listed", func() bool {
		out, err := fabric("-o", "json", "list", "circuits")
		var l struct {
			Data json.RawMessage `json:"data"`
		}
		return err == nil && json.Unmarshal([]byte(out), &l) == nil && json.Unmarshal(l.Data, &circuits) == nil && len(circuits) == 1
	})
	if circuits[0].Service.Name != service {
		t.Errorf("circuit %+v, want service %s", circuits[0], service)
	}
	out, err := fabric("list", "circuits")
	if err != nil || !strings.Contains(out, circuits[0].ID) || !strings.Contains(out, "r/"+router) || !strings.Contains(out, service) {
		t.Errorf("fabric list circuits: %v\n%s", err, out)
	}
	if out, err := fabric("delete", "circuit", circuits[0].ID); err != nil || !strings.Contains(out, "ended circuit "+circuits[0].ID) {
		t.Fatalf("fabric delete circuit: %v %s", err, out)
	}
	conn.SetReadDeadline(time.Now().Add(testutil.Patience))
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the held connection after fabric delete circuit: %v, want EOF", err)
	}
}
