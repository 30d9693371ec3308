package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The circuit measurements, for paths that open a circuit per connection (Target.Circuits):
// how fast circuits are set up, and how much memory an established idle circuit costs the
// routers. Both use echo connections that carry one byte: a circuit counts as set up once the
// byte came back from the sink, so it is routed end to end.

// circuitTimeout bounds the setup of one circuit, from connect to the echoed byte.
const circuitTimeout = 10 * time.Second

// maxConsecutiveFailures stops a setup worker whose circuits keep failing: the path is broken
// rather than slow.
const maxConsecutiveFailures = 100

// CircuitSetup is a circuit setup measurement: connections each opened, carrying one byte to
// the sink and back, and closed, for Seconds. Closed loop (Rate 0): Workers connections at a
// time, back to back, which finds the most circuits per second. Open loop (Rate set): a
// connection started every 1/Rate seconds whatever the others are doing (at most Workers
// open at once), which shows the latency at that rate.
type CircuitSetup struct {
	Workers int     `json:"workers"`
	Rate    float64 `json:"rate,omitempty"`
	Seconds float64 `json:"seconds"`
	// Circuits is the number of circuits set up (their byte came back); Failed the number
	// that did not, with the first failure's error.
	Circuits     int    `json:"circuits"`
	Failed       int    `json:"failed"`
	FirstFailure string `json:"firstFailure,omitempty"`
	// PerSecond is Circuits over Seconds.
	PerSecond float64 `json:"perSecond"`
	// Latency is the time from connect to the echoed byte, over the circuits set up; open
	// loop, from the moment the circuit was due to start, so that a stall of the load
	// generator or of the path counts against every circuit it delayed.
	Latency Latency `json:"latency"`
}

// IdleMemory is the idle-circuit measurement: Circuits circuits established (each carried one
// echoed byte) and left idle, and the resident memory of each router before and after.
type IdleMemory struct {
	// Requested is Options.IdleCircuits; Circuits is fewer when the load generator's file
	// descriptor limit does not allow that many.
	Requested   int            `json:"requested"`
	Circuits    int            `json:"circuits"`
	OpenSeconds float64        `json:"openSeconds"`
	Routers     []RouterMemory `json:"routers"`
}

// RouterMemory is one router's resident set size (VmRSS) before the idle circuits were opened
// and while they were open, and the difference per circuit.
type RouterMemory struct {
	Router          string  `json:"router"`
	Role            string  `json:"role"`
	RSSBefore       int64   `json:"rssBeforeBytes"`
	RSSAfter        int64   `json:"rssAfterBytes"`
	BytesPerCircuit float64 `json:"bytesPerCircuit"`
}

// idleOpened is what the idle load generator reports once its circuits are established.
type idleOpened struct {
	Requested int     `json:"requested"`
	Circuits  int     `json:"circuits"`
	Seconds   float64 `json:"seconds"`
}

// openCircuit connects through c in echo mode and waits for one byte to come back, so that the
// circuit behind the connection is established end to end. It returns the connection and the
// time from connect to the echoed byte.
func openCircuit(ctx context.Context, c *connector) (loadConn, time.Duration, error) {
	start := time.Now()
	addr := c.target
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("dial %s: %w", addr, err)
	}
	if err := conn.SetDeadline(start.Add(circuitTimeout)); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("set deadline: %w", err)
	}
	if _, err := conn.Write([]byte{modeEcho, 'c'}); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("write to %s: %w", addr, err)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("read the echoed byte through %s: %w", addr, err)
	}
	elapsed := time.Since(start)
	if b[0] != 'c' {
		conn.Close()
		return nil, 0, fmt.Errorf("through %s: echoed %q, sent 'c'", addr, b[0])
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("clear deadline: %w", err)
	}
	return conn, elapsed, nil
}

// runSetup runs workers loops that open a circuit through c, wait for its echoed byte and close
// it, for d.
func runSetup(ctx context.Context, c *connector, workers int, d time.Duration) (CircuitSetup, error) {
	start := time.Now()
	deadline := start.Add(d)
	type outcome struct {
		lat          []time.Duration
		failed       int
		firstFailure error
		err          error
	}
	out := make([]outcome, workers)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			o := &out[i]
			consecutive := 0
			for time.Now().Before(deadline) {
				conn, lat, err := openCircuit(ctx, c)
				if ctx.Err() != nil {
					o.err = ctx.Err()
					return
				}
				if err != nil {
					o.failed++
					if o.firstFailure == nil {
						o.firstFailure = err
					}
					if consecutive++; consecutive >= maxConsecutiveFailures {
						o.err = fmt.Errorf("setup worker %d: %d circuits in a row failed, the last: %w", i+1, consecutive, err)
						return
					}
					continue
				}
				consecutive = 0
				conn.Close()
				o.lat = append(o.lat, lat)
			}
		})
	}
	wg.Wait()
	res := CircuitSetup{Workers: workers, Seconds: time.Since(start).Seconds()}
	var all []time.Duration
	var errs []error
	for _, o := range out {
		all = append(all, o.lat...)
		res.Failed += o.failed
		if o.firstFailure != nil && res.FirstFailure == "" {
			res.FirstFailure = o.firstFailure.Error()
		}
		if o.err != nil {
			errs = append(errs, o.err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if len(all) == 0 {
		return res, fmt.Errorf("circuit setup through %s: no circuit was set up in %s (%d failed; first: %s)", c.target, d, res.Failed, res.FirstFailure)
	}
	res.Circuits = len(all)
	res.PerSecond = float64(res.Circuits) / res.Seconds
	res.Latency = summarize(all)
	return res, nil
}

// runPacedSetup starts a circuit through c every 1/rate seconds for d (open loop), each
// waiting for its echoed byte and closing, with at most inFlight open at once.
func runPacedSetup(ctx context.Context, c *connector, rate float64, inFlight int, d time.Duration) (CircuitSetup, error) {
	interval := time.Duration(float64(time.Second) / rate)
	slots := make(chan struct{}, inFlight)
	var (
		mu           sync.Mutex
		lat          []time.Duration
		failed       int
		firstFailure error
		wg           sync.WaitGroup
	)
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if !due.Before(start.Add(d)) {
			break
		}
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				wg.Wait()
				return CircuitSetup{}, ctx.Err()
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return CircuitSetup{}, ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-slots }()
			conn, _, err := openCircuit(ctx, c)
			took := time.Since(due)
			if err == nil {
				conn.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if firstFailure == nil {
					firstFailure = err
				}
				return
			}
			lat = append(lat, took)
		})
	}
	wg.Wait()
	res := CircuitSetup{Workers: inFlight, Rate: rate, Seconds: time.Since(start).Seconds(), Failed: failed}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if firstFailure != nil {
		res.FirstFailure = firstFailure.Error()
	}
	if len(lat) == 0 {
		return res, fmt.Errorf("circuit setup at %.0f/s through %s: no circuit was set up in %s (%d failed; first: %s)", rate, c.target, d, failed, res.FirstFailure)
	}
	res.Circuits = len(lat)
	res.PerSecond = float64(res.Circuits) / res.Seconds
	res.Latency = summarize(lat)
	return res, nil
}

// fdReserve is the number of file descriptors the idle load generator keeps for itself.
const fdReserve = 64

// openIdle opens n circuits through c (fewer when the file descriptor limit is lower), with
// parallel connections being opened at a time, and returns them once each carried its byte.
func openIdle(ctx context.Context, c *connector, n, parallel int) ([]loadConn, idleOpened, error) {
	res := idleOpened{Requested: n, Circuits: n}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(n)+fdReserve {
		res.Circuits = max(int(lim.Cur)-fdReserve, 0)
	}
	if res.Circuits == 0 {
		return nil, res, fmt.Errorf("idle circuits: the file descriptor limit %d leaves no room for a circuit", lim.Cur)
	}
	conns := make([]loadConn, res.Circuits)
	errs := make([]error, parallel)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range parallel {
		wg.Go(func() {
			for i := w; i < len(conns); i += parallel {
				conn, _, err := openCircuit(ctx, c)
				if err != nil {
					errs[w] = fmt.Errorf("idle circuit %d of %d: %w", i+1, len(conns), orCtx(ctx, err))
					return
				}
				conns[i] = conn
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		opened := 0
		for _, conn := range conns {
			if conn != nil {
				opened++
				conn.Close()
			}
		}
		return nil, res, fmt.Errorf("%w (%d circuits were open)", err, opened)
	}
	return conns, res, nil
}

// rss returns the resident set size of process pid, from VmRSS in /proc/<pid>/status (Linux
// only).
func rss(pid int) (int64, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read resident memory: %w", err)
	}
	return parseVmRSS(string(raw))
}

// parseVmRSS returns the VmRSS line of a /proc/<pid>/status file in bytes.
func parseVmRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("parse /proc status: VmRSS line %q", strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc status: VmRSS: %w", err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("parse /proc status: no VmRSS line")
}
