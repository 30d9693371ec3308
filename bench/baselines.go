package bench

import (
	"context"
	"fmt"
)

// Names of the baseline scenarios, for zmesh scenarios to name as their Baseline.
const (
	// BaselineDirect is the load generator connected straight to the sink.
	BaselineDirect = "direct"
	// BaselineProxy is one Go relay process forwarding each TCP connection to the sink with
	// io.Copy (which splices on Linux): what one zmesh router is measured against.
	BaselineProxy = "io-copy"
	// BaselineTLSRelay is two Go relay processes, A and B, with TLS 1.3 between them: A takes
	// TCP in and opens a mutually authenticated TLS connection to B for each of them, B
	// forwards to the sink over TCP. What two zmesh routers over a tls: or quic: link are
	// measured against.
	BaselineTLSRelay = "tls-2hop"
	// BaselineE2ERelay is BaselineTLSRelay with the layers of encryption of zmesh's SDK path:
	// the load generator opens TLS to relay A (the edge hop), A speaks TLS to B (the link),
	// and inside, an end-to-end TLS session runs from the load generator to B, which hands
	// the plaintext to the sink. What the SDK with end-to-end encryption is measured
	// against.
	BaselineE2ERelay = "tls-e2e-relay"
)

// Baselines returns the plain Go paths, in the order they run.
func Baselines() []Scenario {
	return []Scenario{
		Define(BaselineDirect, "", func(_ context.Context, env *Env) (Target, error) {
			return Target{Addr: env.Sink}, nil
		}),
		Define(BaselineProxy, "", setupProxy),
		Define(BaselineTLSRelay, "", setupTLSRelay),
		Define(BaselineE2ERelay, "", setupE2ERelay),
	}
}

func setupProxy(ctx context.Context, env *Env) (Target, error) {
	relay, err := env.Start(ctx, Command{Name: "relay", Worker: true, Relay: true,
		Args: []string{"relay", "--to", env.Sink}})
	if err != nil {
		return Target{}, fmt.Errorf("io-copy relay: %w", err)
	}
	return Target{Addr: relay.Addr(), Circuits: true}, nil
}

func setupTLSRelay(ctx context.Context, env *Env) (Target, error) {
	cert, key, err := writeSelfSigned(env.Dir)
	if err != nil {
		return Target{}, err
	}
	b, err := env.Start(ctx, Command{Name: "relay-b", Worker: true, Relay: true,
		Args: []string{"relay", "--in", "tls", "--cert", cert, "--key", key, "--to", env.Sink}})
	if err != nil {
		return Target{}, fmt.Errorf("tls-2hop relay B: %w", err)
	}
	a, err := env.Start(ctx, Command{Name: "relay-a", Worker: true, Relay: true,
		Args: []string{"relay", "--out", "tls", "--cert", cert, "--key", key, "--to", b.Addr()}})
	if err != nil {
		return Target{}, fmt.Errorf("tls-2hop relay A: %w", err)
	}
	return Target{Addr: a.Addr(), Circuits: true}, nil
}

func setupE2ERelay(ctx context.Context, env *Env) (Target, error) {
	cert, key, err := writeSelfSigned(env.Dir)
	if err != nil {
		return Target{}, err
	}
	b, err := env.Start(ctx, Command{Name: "relay-b", Worker: true, Relay: true,
		Args: []string{"relay", "--in", relayInE2E, "--cert", cert, "--key", key, "--to", env.Sink}})
	if err != nil {
		return Target{}, fmt.Errorf("%s relay B: %w", BaselineE2ERelay, err)
	}
	a, err := env.Start(ctx, Command{Name: "relay-a", Worker: true, Relay: true,
		Args: []string{"relay", "--in", "tls", "--out", "tls", "--cert", cert, "--key", key, "--to", b.Addr()}})
	if err != nil {
		return Target{}, fmt.Errorf("%s relay A: %w", BaselineE2ERelay, err)
	}
	return Target{Addr: a.Addr(), Circuits: true, Via: []string{"--via", ViaTLSE2E, "--cert", cert, "--key", key}}, nil
}
