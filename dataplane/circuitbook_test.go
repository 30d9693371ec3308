package dataplane

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// Circuit events and per-service metrics (circuitbook.go) on real circuits.

// eventLog is a router's log as JSON lines in a buffer, read back as its circuit events.
type eventLog struct{ buf ctrltest.LogBuffer }

func (l *eventLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// events returns the circuit events logged so far, each line's attributes; a line that is
// not JSON fails the test.
func (l *eventLog) events(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.buf.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if line["msg"] == circuitEventMsg {
			if line["level"] != "INFO" {
				t.Errorf("circuit event at level %v: %s", line["level"], sc.Text())
			}
			out = append(out, line)
		}
	}
	return out
}

// find returns the events of kind whose service attribute is service.
func find(events []map[string]any, kind, service string) []map[string]any {
	var out []map[string]any
	for _, e := range events {
		if e["event"] == kind && e["service"] == service {
			out = append(out, e)
		}
	}
	return out
}

// checkAttrs fails the test unless event has every attribute of want with its value (JSON
// numbers are float64) and no other attributes than those and the log's own (time, level,
// msg, router).
func checkAttrs(t *testing.T, where string, event map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got, ok := event[k]; !ok || got != v {
			t.Errorf("%s: %s = %v (present %v), want %v; event %v", where, k, got, ok, v, event)
		}
	}
	for k := range event {
		switch k {
		case "time", "level", "msg", "router":
			continue
		}
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected attribute %s in %v", where, k, event)
		}
	}
}

// A circuit from A's proxy tunnel to a service behind C, over their link: each router logs
// its end created and ended, with the bytes each way the client and the server counted, and
// counts the circuit and its bytes under the service's name. A service whose terminator
// cannot be dialed is refused: C logs why its dial failed, A what the controller answered.
func TestCircuitEventsAndServiceMetrics(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	var logA, logC eventLog
	n.logs = map[string]*slog.Logger{"A": logA.logger(), "C": logC.logger()}
	const observe = "metrics: {circuitEvents: true}\n"
	c := n.addRouter("C", false, `link:
  listeners:
    - binding: transport
      bind: tls:127.0.0.1:{{port}}
      advertise: tls:127.0.0.1:{{same}}
      groups: [ac]
`+observe+opsWeb)
	a := n.addRouter("A", true, `link:
  dialers:
    - binding: transport
      groups: [ac]
listeners:
  - binding: tunnel
    options:
      mode: proxy
      services: [data:{{port}}, down:{{port}}]
`+observe+opsWeb)
	testutil.Eventually(t, "link A–C", func() bool { return n.linked("A", "C") })
	srv := newStreamServer(t)
	n.service("data", "C", srv.addr())
	n.service("down", "C", testutil.ClosedAddr(t))
	data, err := n.m.CachedServiceByName("data")
	if err != nil {
		t.Fatal(err)
	}
	down, err := n.m.CachedServiceByName("down")
	if err != nil {
		t.Fatal(err)
	}

	const up, back = 100_000, 300_000
	if err := transfer(srv, a.r.ProxyAddress("data"), up, back, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sent, received := float64(up+headerSize), float64(back) // the client's header is data too
	testutil.Eventually(t, "both ends' ended events", func() bool {
		return len(find(logA.events(t), eventEnded, "data")) == 1 && len(find(logC.events(t), eventEnded, "data")) == 1
	})
	var circuit any
	for _, tc := range []struct {
		name string
		log  *eventLog
		role string
	}{{"A", &logA, "initiator"}, {"C", &logC, "terminator"}} {
		events := tc.log.events(t)
		created, ended := find(events, eventCreated, "data"), find(events, eventEnded, "data")
		if len(created) != 1 {
			t.Fatalf("router %s logged %d created events for one circuit: %v", tc.name, len(created), events)
		}
		if circuit == nil {
			circuit = created[0]["circuit"]
		}
		common := map[string]any{"event": eventCreated, "circuit": circuit, "service": "data", "serviceId": data.ID,
			"identity": a.id, "role": tc.role} // A's tunnel dials as A's identity
		checkAttrs(t, tc.name+" created", created[0], common)
		common["event"], common["sentBytes"], common["receivedBytes"], common["reason"] = eventEnded, sent, received, "closed"
		d, _ := ended[0]["duration"].(float64) // nanoseconds
		common["duration"] = ended[0]["duration"]
		checkAttrs(t, tc.name+" ended", ended[0], common)
		if d <= 0 {
			t.Errorf("router %s: ended duration %v", tc.name, ended[0]["duration"])
		}
	}
	if id, _ := circuit.(string); id == "" || strings.Trim(id, "0123456789") != "" {
		t.Fatalf("circuit id %v in the events, want a decimal string", circuit)
	}

	// Both routers count the circuit once, with the bytes both ends saw.
	for _, tr := range []*testRouter{a, c} {
		cl, base := webClient(t, tr)
		m := getMetrics(t, cl, base)
		for _, s := range []struct {
			name string
			want float64
		}{{"zmesh_service_circuits_total", 1}, {"zmesh_service_sent_bytes_total", sent}, {"zmesh_service_received_bytes_total", received}} {
			if v, ok := value(m, s.name, "service", "data"); !ok || v != s.want {
				t.Errorf("router %s: %s{service=\"data\"} = %v (present %v), want %v", tr.name, s.name, v, ok, s.want)
			}
		}
		if v, ok := value(m, "zmesh_service_circuits_total", "service", "_other"); !ok || v != 0 {
			t.Errorf("router %s: zmesh_service_circuits_total{service=\"_other\"} = %v (present %v), want 0", tr.name, v, ok)
		}
	}

	// The refused circuit: the client's connection is closed without data.
	conn, err := net.Dial("tcp", a.r.ProxyAddress("down"))
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the client of a service that cannot be dialed read data")
	}
	conn.Close()
	testutil.Eventually(t, "both routers' refused events", func() bool {
		return len(find(logA.events(t), eventRefused, "down")) == 1 && len(find(logC.events(t), eventRefused, "down")) == 1
	})
	refusedC := find(logC.events(t), eventRefused, "down")[0]
	reasonC, _ := refusedC["reason"].(string)
	checkAttrs(t, "C refused", refusedC, map[string]any{"event": eventRefused, "circuit": refusedC["circuit"], "service": "down",
		"serviceId": down.ID, "identity": a.id, "role": "terminator", "reason": reasonC})
	if refusedC["circuit"] == nil || !strings.Contains(reasonC, "refused") {
		t.Errorf("C's refused event names no circuit, or does not say the dial was refused: %v", refusedC)
	}
	// A asked by name: the controller made no circuit, so A knows neither its id nor the
	// service's.
	refusedA := find(logA.events(t), eventRefused, "down")[0]
	reasonA, _ := refusedA["reason"].(string)
	checkAttrs(t, "A refused", refusedA, map[string]any{"event": eventRefused, "service": "down", "serviceId": "",
		"identity": a.id, "role": "initiator", "reason": reasonA})
	if reasonA == "" {
		t.Error("A's refused event gives no reason")
	}
	for _, l := range []*eventLog{&logA, &logC} {
		if got := find(l.events(t), eventCreated, "down"); len(got) != 0 {
			t.Errorf("a refused circuit was logged as created: %v", got)
		}
	}
}

// One router terminating the circuits it carries (both ends here, spliced), events off,
// per-service labels limited to 2: four services give two labels and _other, with every
// circuit and byte counted once, and no circuit event is logged.
func TestServiceMetricsLimit(t *testing.T) {
	t.Parallel()
	n := newTestNet(t)
	var logS eventLog
	n.logs = map[string]*slog.Logger{"S": logS.logger()}
	names := []string{"s1", "s2", "s3", "s4"}
	services := ""
	for _, name := range names {
		services += name + ":{{port}}, "
	}
	s := n.addRouter("S", true, `listeners:
  - binding: tunnel
    options:
      mode: proxy
      services: [`+strings.TrimSuffix(services, ", ")+`]
metrics: {serviceLabelLimit: 2}
`+opsWeb)
	srv := newStreamServer(t)
	for _, name := range names {
		n.service(name, "S", srv.addr())
	}
	// Service i carries i+1 circuits of (i+1)·1000 bytes up and (i+1)·3000 down each.
	type counts struct{ circuits, sent, received float64 }
	want := map[string]*counts{"s1": {}, "s2": {}, "_other": {}}
	for i, name := range names {
		label := name
		if i >= 2 {
			label = "_other"
		}
		for range i + 1 {
			upN, downN := int64(i+1)*1000, int64(i+1)*3000
			if err := transfer(srv, s.r.ProxyAddress(name), upN, downN, 30*time.Second); err != nil {
				t.Fatalf("service %s: %v", name, err)
			}
			w := want[label]
			w.circuits++
			w.sent += float64(upN + headerSize)
			w.received += float64(downN)
		}
	}
	cl, base := webClient(t, s)
	testutil.Eventually(t, "every circuit ended", func() bool {
		s.r.book.mu.Lock()
		defer s.r.book.mu.Unlock()
		return len(s.r.book.circuits) == 0
	})
	m := getMetrics(t, cl, base)
	for _, name := range []string{"zmesh_service_circuits_total", "zmesh_service_sent_bytes_total", "zmesh_service_received_bytes_total"} {
		var labels []string
		for _, sample := range m[name].GetMetric() {
			for _, l := range sample.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
		}
		slices.Sort(labels)
		if got := fmt.Sprint(labels); got != "[service=_other service=s1 service=s2]" {
			t.Errorf("%s labels %s, want s1, s2 and _other", name, got)
		}
	}
	for label, w := range want {
		for _, s := range []struct {
			name string
			want float64
		}{{"zmesh_service_circuits_total", w.circuits}, {"zmesh_service_sent_bytes_total", w.sent}, {"zmesh_service_received_bytes_total", w.received}} {
			if v, ok := value(m, s.name, "service", label); !ok || v != s.want {
				t.Errorf("%s{service=%q} = %v (present %v), want %v", s.name, label, v, ok, s.want)
			}
		}
	}
	if events := logS.events(t); len(events) != 0 {
		t.Errorf("circuit events logged with metrics.circuitEvents off: %v", events)
	}
	if !strings.Contains(logS.buf.String(), `"router":"`+s.id+`"`) {
		t.Error("the router's log captured nothing: the check of no events checks nothing")
	}
}
