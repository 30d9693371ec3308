package dataplane

import (
	"encoding/json"
	"io"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/api"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/testutil"
)

// fabric calls the controller's fabric API as an administrator and decodes data into out.
func (n *testNet) fabric(method, path, body string, out any) int {
	t := n.t
	t.Helper()
	if n.session == "" {
		s, _, err := n.m.AuthenticatePassword(t.Context(), "admin", "admin-pass", model.Login{Source: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		n.session = s.Token
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, api.FabricBase+path, rd)
	req.Header.Set("zt-session", n.session)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	n.ctrl.Handler().ServeHTTP(rec, req)
	if out != nil && rec.Code == 200 {
		env := struct {
			Data any `json:"data"`
		}{out}
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, rec.Body)
		}
	}
	return rec.Code
}

type fabricRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// The fabric API shows the line's routers (connected, with their version), its two links
// and a live circuit with its path A → B → C over those links; deleting the circuit ends it
// on every router of the path, and the client's connection closes.
func TestFabricAPICircuitLifecycle(t *testing.T) {
	t.Parallel()
	n, _, addr := line(t, "tls", false)

	var routers []struct {
		fabricRef
		Connected   bool `json:"connected"`
		VersionInfo *struct {
			Version string `json:"version"`
		} `json:"versionInfo"`
		ListenerAddresses []struct {
			Address  string `json:"address"`
			Protocol string `json:"protocol"`
		} `json:"listenerAddresses"`
	}
	if code := n.fabric("GET", "/routers?limit=100", "", &routers); code != 200 || len(routers) != 3 {
		t.Fatalf("routers: %d %+v", code, routers)
	}
	for _, r := range routers {
		if !r.Connected || r.VersionInfo == nil || r.VersionInfo.Version == "" {
			t.Errorf("router %s: connected %v, version %+v", r.Name, r.Connected, r.VersionInfo)
		}
		if r.Name == "B" && (len(r.ListenerAddresses) != 1 || r.ListenerAddresses[0].Protocol != "tls") {
			t.Errorf("router B listeners %+v", r.ListenerAddresses)
		}
	}

	type link struct {
		ID            string    `json:"id"`
		SourceRouter  fabricRef `json:"sourceRouter"`
		DestRouter    fabricRef `json:"destRouter"`
		State         string    `json:"state"`
		Protocol      string    `json:"protocol"`
		SourceLatency int64     `json:"sourceLatency"`
		Cost          int64     `json:"cost"`
	}
	var links []link
	if code := n.fabric("GET", "/links", "", &links); code != 200 || len(links) != 2 {
		t.Fatalf("links: %d %+v", code, links)
	}
	linkOf := map[string]string{} // "A-B" and "B-C" → link id
	for _, l := range links {
		pair := []string{l.SourceRouter.Name, l.DestRouter.Name}
		slices.Sort(pair)
		linkOf[strings.Join(pair, "-")] = l.ID
		if l.State != "Connected" || l.Protocol != "tls" || l.Cost < 1 {
			t.Errorf("link %+v", l)
		}
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type circuit struct {
		ID         string    `json:"id"`
		ClientID   string    `json:"clientId"`
		Service    fabricRef `json:"service"`
		Terminator fabricRef `json:"terminator"`
		CreatedAt  time.Time `json:"createdAt"`
		Path       struct {
			Nodes []fabricRef `json:"nodes"`
			Links []fabricRef `json:"links"`
		} `json:"path"`
	}
	var circuits []circuit
	testutil.Eventually(t, "the proxy's circuit listed", func() bool {
		return n.fabric("GET", "/circuits", "", &circuits) == 200 && len(circuits) == 1
	})
	c := circuits[0]
	var nodes []string
	for _, node := range c.Path.Nodes {
		nodes = append(nodes, node.Name)
	}
	if !slices.Equal(nodes, []string{"A", "B", "C"}) {
		t.Errorf("path nodes %v, want A B C", nodes)
	}
	if len(c.Path.Links) != 2 || c.Path.Links[0].ID != linkOf["A-B"] || c.Path.Links[1].ID != linkOf["B-C"] {
		t.Errorf("path links %+v, want %s, %s", c.Path.Links, linkOf["A-B"], linkOf["B-C"])
	}
	if c.Service.Name != "data" || c.Terminator.ID == "" || c.ClientID != n.routers["A"].id || c.CreatedAt.IsZero() {
		t.Errorf("circuit %+v", c)
	}
	var one circuit
	if code := n.fabric("GET", "/circuits/"+c.ID, "", &one); code != 200 || one.ID != c.ID {
		t.Errorf("GET circuit %s: %d %+v", c.ID, code, one)
	}

	if code := n.fabric("DELETE", "/circuits/"+c.ID, `{"immediate":false}`, nil); code != 200 {
		t.Fatalf("DELETE circuit: %d", code)
	}
	testutil.Eventually(t, "the circuit gone from every router", func() bool {
		for _, name := range []string{"A", "B", "C"} {
			if n.routers[name].r.Forwarder().CircuitCount() != 0 || n.endsOn(name) != 0 {
				return false
			}
		}
		return true
	})
	conn.SetReadDeadline(time.Now().Add(testutil.Patience))
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the client's connection after the delete: %v, want EOF", err)
	}
	if code := n.fabric("GET", "/circuits/"+c.ID, "", nil); code != 404 {
		t.Errorf("GET deleted circuit: %d", code)
	}
	if code := n.fabric("DELETE", "/circuits/"+c.ID, "", nil); code != 404 {
		t.Errorf("DELETE deleted circuit: %d", code)
	}
}
