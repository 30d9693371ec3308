//go:build unix

package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRunZmesh runs the one-router scenario and the two-router one over tls: end to end, every
// router its own process (the test binary acting as `zmesh router run`), with their baselines,
// the circuit setup measurement and a few idle circuits.
func TestRunZmesh(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pids := &pidLog{pids: map[int]string{}}
	rep, err := Run(ctx, Options{
		Exec:          testExec(t),
		Scenarios:     append(Baselines(), Zmesh()...),
		Only:          []string{ZmeshOneRouter, ZmeshTwoRoutersTLS},
		Duration:      300 * time.Millisecond,
		Streams:       2,
		RTTSamples:    200,
		SetupDuration: 300 * time.Millisecond,
		SetupWorkers:  4,
		SetupRate:     300,
		IdleCircuits:  200,
		Started:       pids.started,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// io-copy: sink, relay, 2 loadgens; tls-2hop: sink, 2 relays, 2 loadgens; zmesh-1router:
	// sink, router, 4 loadgens; zmesh-2routers-tls: sink, 2 routers, 5 loadgens.
	pids.checkGone(t, 4+5+6+8)
	var names []string
	for _, res := range rep.Results {
		names = append(names, res.Scenario)
	}
	if want := []string{BaselineProxy, BaselineTLSRelay, ZmeshOneRouter, ZmeshTwoRoutersTLS}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("scenarios %q, want %q", names, want)
	}
	for _, res := range rep.Results[2:] {
		if res.Throughput == nil || res.Throughput.Bytes <= 0 || len(res.Throughput.Streams) != 2 {
			t.Errorf("%s: throughput %+v", res.Scenario, res.Throughput)
		}
		if res.RTT == nil || res.RTT.Samples <= 0 {
			t.Errorf("%s: rtt %+v", res.Scenario, res.RTT)
		}
		if res.CPUSecondsPerGiB == nil || res.Ratio == nil || res.Ratio.Throughput <= 0 {
			t.Errorf("%s: CPU %v, ratio %+v", res.Scenario, res.CPUSecondsPerGiB, res.Ratio)
		}
		s := res.CircuitSetup
		if s == nil || s.Circuits <= 0 || s.PerSecond <= 0 || s.Latency.P99 < s.Latency.P50 || s.Workers != 4 || s.Rate != 0 {
			t.Errorf("%s: circuit setup %+v", res.Scenario, s)
		} else if s.Failed != 0 {
			t.Errorf("%s: %d circuits failed to set up; first: %s", res.Scenario, s.Failed, s.FirstFailure)
		}
		// 300 a second for 300 ms: about 90 circuits, started whatever the others did.
		p := res.PacedSetup
		if p == nil || p.Rate != 300 || p.Circuits < 60 || p.Circuits > 91 || p.Latency.P99 < p.Latency.P50 {
			t.Errorf("%s: paced circuit setup %+v", res.Scenario, p)
		} else if p.Failed != 0 {
			t.Errorf("%s: %d paced circuits failed to set up; first: %s", res.Scenario, p.Failed, p.FirstFailure)
		}
	}
	if m := rep.Results[2].IdleMemory; m != nil {
		t.Errorf("%s: idle memory %+v, want none (one router holds both ends)", ZmeshOneRouter, m)
	}
	m := rep.Results[3].IdleMemory
	if m == nil || m.Circuits != 200 || m.Requested != 200 || len(m.Routers) != 2 {
		t.Fatalf("%s: idle memory %+v", ZmeshTwoRoutersTLS, m)
	}
	for i, role := range []string{"ingress", "egress"} {
		r := m.Routers[i]
		if r.Role != role || r.Router != []string{"router-a", "router-b"}[i] || r.RSSBefore <= 0 || r.RSSAfter <= 0 {
			t.Errorf("idle memory of router %d: %+v", i, r)
		}
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"zmesh-1router", "zmesh-2routers-tls", "SETUP/S", "SETUP P99", "@300/S P99", "ingress router-a:", "egress router-b:", "KiB"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"circuitSetup":`, `"pacedSetup":`, `"rate":300`, `"setupRate":300`, `"perSecond":`, `"idleMemory":`, `"bytesPerCircuit":`, `"setupWorkers":4`, `"idleCircuits":200`} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("JSON lacks %s:\n%s", want, raw)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	t.Parallel()
	status := "Name:\tzmesh\nVmPeak:\t  99 kB\nVmRSS:\t   12345 kB\nThreads:\t7\n"
	if got, err := parseVmRSS(status); err != nil || got != 12345<<10 {
		t.Errorf("parseVmRSS = %d, %v; want %d", got, err, 12345<<10)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n"} {
		if _, err := parseVmRSS(bad); err == nil {
			t.Errorf("parseVmRSS(%q) succeeded", bad)
		}
	}
}

func TestCircuitsTable(t *testing.T) {
	t.Parallel()
	rep := &Report{Streams: 1, SetupSeconds: 3, SetupWorkers: 16, IdleCircuits: 10000, Results: []Result{
		{Scenario: "io-copy"},
		{Scenario: "one", CircuitSetup: &CircuitSetup{PerSecond: 5234.4, Failed: 2, Latency: Latency{P50: 1500, P99: 12500}}},
		{Scenario: "two", IdleMemory: &IdleMemory{Requested: 10000, Circuits: 9000,
			Routers: []RouterMemory{{Router: "router-a", Role: "ingress", BytesPerCircuit: 6144}}}},
	}}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"16 at a time for 3s", "5234", "1500µs", "12.5ms", "9000 of 10000", "ingress router-a: 6.0 KiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "io-copy  -  -") {
		t.Errorf("a scenario without circuit figures has a row:\n%s", out.String())
	}
}

// startZmesh prepares the one-router network in a temporary directory and runs its router,
// with the controller, in this process (so that a profile of the benchmark sees it); it returns
// the tunnel proxy's address once a circuit works.
func startZmesh(b *testing.B) *connector {
	b.Helper()
	sink := startWorker(b, "sink")
	mesh, err := prepareMesh(b.TempDir(), sink, oneRouter(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runRouter(ctx, mesh.routers[0].args(mesh.ctrlFile)[1:], io.Discard, io.Discard) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("router: %v", err)
		}
	})
	c, err := newConnector(connectorConfig{addr: mesh.proxyAddr})
	if err != nil {
		b.Fatal(err)
	}
	if err := probeCircuit(ctx, c, readyTimeout); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkZmeshOneRouter measures one router with the controller co-located, in this
// process: circuit setup (8 at a time per GOMAXPROCS), throughput of 256 KiB writes, and 64-byte round
// trips. `go test -bench ZmeshOneRouter -cpuprofile cpu.out ./bench` shows where the router
// spends its time (the sink and the load generator run in the same process).
func BenchmarkZmeshOneRouter(b *testing.B) {
	c := startZmesh(b)
	b.Run("setup", func(b *testing.B) {
		b.SetParallelism(8) // 8 circuits at a time per GOMAXPROCS
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				conn, _, err := openCircuit(b.Context(), c)
				if err != nil {
					b.Error(err)
					return
				}
				conn.Close()
			}
		})
	})
	b.Run("throughput", func(b *testing.B) {
		conns, err := dialAll(b.Context(), c, 1, modeDiscard)
		if err != nil {
			b.Fatal(err)
		}
		conn := conns[0]
		defer conn.Close()
		buf := make([]byte, 256<<10)
		b.SetBytes(int64(len(buf)))
		var sent uint64
		for b.Loop() {
			n, err := conn.Write(buf)
			sent += uint64(n)
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		conn.CloseWrite()
		var count [8]byte
		if _, err := io.ReadFull(conn, count[:]); err != nil || binary.BigEndian.Uint64(count[:]) != sent {
			b.Fatalf("the sink counted %d bytes of %d (%v)", binary.BigEndian.Uint64(count[:]), sent, err)
		}
	})
	b.Run("echo64", func(b *testing.B) {
		conns, err := dialAll(b.Context(), c, 1, modeEcho)
		if err != nil {
			b.Fatal(err)
		}
		conn := conns[0]
		defer conn.Close()
		req, resp := make([]byte, echoSize), make([]byte, echoSize)
		for b.Loop() {
			if _, err := conn.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(conn, resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestRunZmeshSDKEncrypted runs the end-to-end encrypted scenario: an SDK client's standalone
// tunneler dials the service through two routers to router B's tunnel in host mode, every
// part its own process, with the circuit setup measurement.
func TestRunZmeshSDKEncrypted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pids := &pidLog{pids: map[int]string{}}
	rep, err := Run(ctx, Options{
		Exec:          testExec(t),
		Scenarios:     append(Baselines(), Zmesh()...),
		Only:          []string{ZmeshSDKEncrypted, ZmeshSDKEncryptedInProcess},
		Duration:      300 * time.Millisecond,
		Streams:       2,
		RTTSamples:    200,
		SetupDuration: 300 * time.Millisecond,
		SetupWorkers:  4,
		SkipSetupRate: true,
		Started:       pids.started,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// tls-e2e-relay: sink, 2 relays, 3 loadgens; zmesh-sdk-e2ee: sink, 2 routers, the SDK
	// client, 3 loadgens; zmesh-sdk-e2ee-inproc: sink, 2 routers, 3 loadgens.
	pids.checkGone(t, 6+7+6)
	if len(rep.Results) != 3 || rep.Results[0].Scenario != BaselineE2ERelay || rep.Results[1].Scenario != ZmeshSDKEncrypted ||
		rep.Results[2].Scenario != ZmeshSDKEncryptedInProcess {
		t.Fatalf("results %+v", rep.Results)
	}
	for _, res := range rep.Results[1:] {
		if res.Throughput == nil || res.Throughput.Bytes <= 0 || len(res.Throughput.Streams) != 2 {
			t.Errorf("%s: throughput %+v", res.Scenario, res.Throughput)
		}
		if res.RTT == nil || res.RTT.Samples <= 0 || res.Ratio == nil || res.Ratio.Throughput <= 0 {
			t.Errorf("%s: rtt %+v, ratio %+v", res.Scenario, res.RTT, res.Ratio)
		}
		if s := res.CircuitSetup; s == nil || s.Circuits <= 0 || s.Failed != 0 {
			t.Errorf("%s: circuit setup %+v", res.Scenario, s)
		}
	}
}

// TestEmbedsSDK: only a target reached with --via sdk has the load generator on the path.
func TestEmbedsSDK(t *testing.T) {
	for _, c := range []struct {
		via  []string
		want bool
	}{
		{nil, false},
		{[]string{"--via", ViaTLSE2E, "--cert", "sdk"}, false},
		{[]string{"--via", ViaSDK, "--identity", "id.json", "--service", "s"}, true},
		{[]string{"--via"}, false},
	} {
		if got := (Target{Via: c.via}).embedsSDK(); got != c.want {
			t.Errorf("Target{Via: %q}.embedsSDK() = %v, want %v", c.via, got, c.want)
		}
	}
}
