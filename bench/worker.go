package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"
)

// message is what a worker prints on stdout, one JSON object per line: {"addr"} once it
// listens, {"throughput"}, {"echo"} or {"setup"} when a load generator is done, {"idle"} when
// an idle load generator holds its circuits.
type message struct {
	Addr       string   `json:"addr,omitempty"`
	Throughput []Stream `json:"throughput,omitempty"`
	Echo       *Latency `json:"echo,omitempty"`
	// Setup is the result of a circuit setup load generator.
	Setup *CircuitSetup `json:"setup,omitempty"`
	// Idle is printed by an idle load generator once its circuits are established; it then
	// holds them until it is stopped.
	Idle *idleOpened `json:"idle,omitempty"`
}

func decodeMessage(line string, m *message) bool {
	line = strings.TrimSpace(line)
	return strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), m) == nil
}

// workerRoles lists the roles RunWorker accepts.
const workerRoles = "sink, relay, loadgen"

// RunWorker runs the bench worker named by args[0] — sink, relay or loadgen — with the flags
// that follow, reporting on stdout as JSON lines. Servers (sink, relay) print {"addr": ...}
// once they listen and run until ctx ends or stdin reaches EOF, so that a worker never
// outlives the harness that started it; loadgen prints its result and returns, except in
// idle mode, where it holds its circuits until ctx ends or stdin reaches EOF.
func RunWorker(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, log *slog.Logger) error {
	if len(args) == 0 {
		return fmt.Errorf("bench worker: a role is required; allowed: %s", workerRoles)
	}
	stopProfiling, err := StartProfiling()
	if err != nil {
		return fmt.Errorf("bench worker: %w", err)
	}
	defer func() {
		if perr := stopProfiling(); perr != nil {
			log.Warn("bench worker: profiles", "err", perr)
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if stdin != nil {
		go func() {
			io.Copy(io.Discard, stdin)
			cancel()
		}()
	}
	enc := json.NewEncoder(stdout)
	ready := func(addr net.Addr) error {
		if err := enc.Encode(message{Addr: addr.String()}); err != nil {
			return fmt.Errorf("announce %s: %w", addr, err)
		}
		return nil
	}
	role, args := args[0], args[1:]
	log = log.With("worker", role)
	switch role {
	case "sink":
		fs := newFlagSet(role)
		listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
		if err := parse(fs, args); err != nil {
			return err
		}
		return runSink(ctx, *listen, ready, log)
	case "relay":
		var cfg relayConfig
		fs := newFlagSet(role)
		fs.StringVar(&cfg.listen, "listen", "127.0.0.1:0", "address to listen on")
		fs.StringVar(&cfg.to, "to", "", "address to forward every connection to")
		fs.StringVar(&cfg.in, "in", "tcp", "incoming side: tcp, tls, or "+relayInE2E+" (TLS with a second TLS session inside, whose plaintext is forwarded)")
		fs.StringVar(&cfg.out, "out", "tcp", "outgoing side: tcp or tls")
		fs.StringVar(&cfg.cert, "cert", "", "PEM certificate for the tls sides (also their only trusted root)")
		fs.StringVar(&cfg.key, "key", "", "PEM private key of --cert")
		if err := parse(fs, args); err != nil {
			return err
		}
		return runRelay(ctx, cfg, ready, log)
	case "loadgen":
		return runLoadgen(ctx, args, enc)
	default:
		return fmt.Errorf("bench worker: role %q is not allowed; allowed: %s", role, workerRoles)
	}
}

func runLoadgen(ctx context.Context, args []string, enc *json.Encoder) error {
	fs := newFlagSet("loadgen")
	mode := fs.String("mode", "throughput", "throughput, echo, setup or idle")
	var cc connectorConfig
	fs.StringVar(&cc.via, "via", ViaTCP, "how to connect: "+ViaTCP+" (to --addr), "+ViaTLSE2E+" (TLS to --addr and TLS inside it to the far relay, with --cert and --key) or "+ViaSDK+" (a zmesh SDK client of --identity dialing --service)")
	fs.StringVar(&cc.addr, "addr", "", "address to load ("+ViaTCP+", "+ViaTLSE2E+")")
	fs.StringVar(&cc.cert, "cert", "", ViaTLSE2E+": PEM certificate of the relays, also the only trusted root")
	fs.StringVar(&cc.key, "key", "", ViaTLSE2E+": PEM private key of --cert")
	fs.StringVar(&cc.identity, "identity", "", ViaSDK+": the client's identity file")
	fs.StringVar(&cc.service, "service", "", ViaSDK+": the service to dial")
	duration := fs.Duration("duration", 5*time.Second, "throughput: how long to send; echo: the most time to take; setup: how long to open circuits")
	streams := fs.Int("streams", 1, "throughput: parallel TCP connections")
	writeSize := fs.Int("write-size", 256<<10, "throughput: bytes per write")
	conns := fs.Int("conns", 1, "echo: parallel connections; setup: parallel workers; idle: circuits being opened at a time")
	samples := fs.Int("samples", 10000, "echo: round trips to time, in all")
	size := fs.Int("size", 64, "echo: bytes per request (and response)")
	circuits := fs.Int("circuits", 10000, "idle: circuits to open and hold")
	rate := fs.Float64("rate", 0, "setup: circuits started per second (open loop, at most --conns open at once); 0: --conns back to back")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := newConnector(cc)
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	defer c.close()
	var m message
	switch *mode {
	case "throughput":
		if *streams < 1 || *writeSize < 1 || *duration <= 0 {
			return fmt.Errorf("loadgen: --streams %d, --write-size %d and --duration %s must be positive", *streams, *writeSize, *duration)
		}
		m.Throughput, err = runThroughput(ctx, c, *streams, *duration, *writeSize)
	case "echo":
		if *conns < 1 || *samples < 1 || *size < 1 || *duration <= 0 {
			return fmt.Errorf("loadgen: --conns %d, --samples %d, --size %d and --duration %s must be positive", *conns, *samples, *size, *duration)
		}
		var lat Latency
		lat, err = runEcho(ctx, c, *conns, *samples, *duration, *size)
		m.Echo = &lat
	case "setup":
		if *conns < 1 || *duration <= 0 {
			return fmt.Errorf("loadgen: --conns %d and --duration %s must be positive", *conns, *duration)
		}
		if *rate < 0 {
			return fmt.Errorf("loadgen: --rate %g must not be negative", *rate)
		}
		var setup CircuitSetup
		if *rate > 0 {
			setup, err = runPacedSetup(ctx, c, *rate, *conns, *duration)
		} else {
			setup, err = runSetup(ctx, c, *conns, *duration)
		}
		m.Setup = &setup
	case "idle":
		if *conns < 1 || *circuits < 1 {
			return fmt.Errorf("loadgen: --conns %d and --circuits %d must be positive", *conns, *circuits)
		}
		return holdIdle(ctx, c, *circuits, *conns, enc)
	default:
		return fmt.Errorf("loadgen: --mode %q is not allowed; allowed: throughput, echo, setup, idle", *mode)
	}
	if err != nil {
		return err
	}
	if err := enc.Encode(m); err != nil {
		return fmt.Errorf("loadgen: report: %w", err)
	}
	return nil
}

func newFlagSet(role string) *flag.FlagSet {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("bench worker %s: %w", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench worker %s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

// holdIdle opens the idle circuits, reports them and holds them until ctx ends.
func holdIdle(ctx context.Context, c *connector, circuits, parallel int, enc *json.Encoder) error {
	conns, opened, err := openIdle(ctx, c, circuits, parallel)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	if err := enc.Encode(message{Idle: &opened}); err != nil {
		return fmt.Errorf("loadgen: report: %w", err)
	}
	<-ctx.Done()
	return nil
}
