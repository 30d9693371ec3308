// Package bench holds the forwarding benchmarks: overlay paths measured side by side with
// plain Go baselines in the same run, so that ratios, not absolute figures, are compared.
//
// # Processes
//
// Every party of a measurement is its own process, started from the zmesh executable
// (Exec): the sink (`zmesh bench-worker sink`), which discards or echoes as the first byte of
// each connection says; the relays of the baselines (`bench-worker relay`); the scenario's
// routers; and, for each measurement, the load generator (`bench-worker loadgen`). Workers
// speak JSON lines on stdout ({"addr": ...} when listening, the result when done) and stop
// when their stdin closes or on SIGTERM, so none outlives the run. RunWorker is their entry
// point.
//
// # Measurements
//
// For each scenario, in order: for paths that hold circuits (Target.Circuits), first the
// memory per idle circuit, on scenarios that name their routers (Target.IdleRouters): the
// routers' resident set size (VmRSS in /proc/<pid>/status) is read, a load generator opens
// Options.IdleCircuits circuits (each carrying one byte to the sink and back, so that it is
// established end to end) and holds them, and a second later the sizes are read again: the
// difference over the circuits is each router's memory per idle circuit. It comes first so
// that fresh routers are measured, not heaps that earlier measurements left room in. Then
// circuit setup: Options.SetupWorkers loops that connect, carry one byte to the sink and
// back, and close, for Options.SetupDuration, giving the most circuits per second and the
// latency from connect to the echoed byte at that load; then the same open loop, a circuit
// started every 1/Options.SetupRate seconds whatever the earlier ones do (at most 256 open),
// for the latency at that rate, measured from when each circuit was due so that a stall
// counts against every circuit it delayed. The relay baselines (io-copy, tls-2hop) are
// measured the same way, a relayed connection standing for a circuit, so that the zmesh
// paths' setup figures come with ratios to theirs. Between these the harness waits for the
// relay processes to become quiet. Then, for every scenario, throughput (Options.Streams TCP connections
// writing Options.WriteSize buffers for Options.Duration, then half-closing and waiting for
// the sink's count of bytes received, which must match: a stream's rate is what arrived over
// the time it took to arrive), with Jain's fairness index over the per-stream rates; then
// 64-byte echo round trips (Options.RTTSamples, at most Options.Duration after 100 untimed
// warm-up ones), summarised as percentiles; and CPU seconds per GiB, the user+system CPU time of the scenario's Relay
// processes read from /proc/<pid>/stat just before and just after the throughput
// measurement (so setup, echo and shutdown do not count; Linux only, reported as unknown
// elsewhere) divided by the GiB delivered. The load generator and sink are not counted: they
// are the same in every scenario.
//
// # The zmesh scenarios
//
// The load generator connects to a path over TCP, or as Target.Via says: ViaTLSE2E (TLS to
// the target, and a second TLS session inside it to the far relay, for the tls-e2e-relay
// baseline: the layers of encryption of zmesh's SDK path) or ViaSDK (a zmesh SDK client in
// the load generator's process dialing the service, as applications embed it).
//
// Zmesh returns zmesh-1router (one router with the controller co-located: its tunnel proxy
// on-ramp carries each connection as a circuit to its own proxy terminator, which dials the
// sink; against io-copy), zmesh-2routers-tls (router A with the controller, the on-ramp and a
// link dialer; router B with a tls: link listener and the terminator; split links; against
// tls-2hop), zmesh-2routers-quic (the same over quic:) and zmesh-sdk-e2ee (router A with the
// controller, an SDK listener and a link dialer; router B with a tls: link listener and its
// tunnel in host mode; the on-ramp is an SDK client, `zmesh tunnel proxy --identity F`, its
// own process, and the service requires end-to-end encryption, so routers carry ciphertext
// between the client and B's tunnel) and zmesh-sdk-e2ee-inproc (the same with the SDK
// embedded in the load generator), both against tls-e2e-relay. Their setup prepares the network
// in this process before any router starts: it opens the controller (controlplane.Open) on a
// data directory in Env.Dir, creates and enrolls the edge routers (the ingress
// tunneler-enabled, so that it has an identity), creates the service, its terminator on the
// egress (binding proxy, address Env.Sink) and a Dial policy for the ingress's identity, writes
// each router's certificates, key and configuration, and closes the controller so that the
// router process that runs it can lock the data directory. Each router then runs as `zmesh
// router run ROUTER.yml [--controller CONTROLLER.yml]`, awaited by its "router <id> running"
// line; the scenario is ready once a circuit through the on-ramp carried a byte to the sink
// and back (links form asynchronously, so the first circuits may find no path). For
// zmesh-sdk-e2ee the service instead gets a host.v1 config with the sink's address and a Bind
// policy for router B, and an enrolled client identity gets the Dial, edge router and service
// edge router policies; its tunneler starts after the routers. Idle circuits are measured on
// two routers without an SDK client only: one router holding both ends of 10,000 circuits, or
// a host-mode router holding three descriptors per circuit, would need more file descriptors
// than a process may have here.
//
// # Rounds and targets
//
// Options.Repeat runs every selected scenario that many times, each round measuring the
// baselines again, so that each ratio is taken against a baseline of its own round; the
// report keeps each round, and for each scenario the round with the median throughput and
// the median and range of every ratio. Goals are zmesh's performance targets; the report
// checks those the run measured (medians over the rounds), and Report.Missed lists the ones
// it missed (`zmesh bench --check` fails on them).
//
// # Profiles
//
// With Options.ProfileDir set, the processes on the forwarding path (Command.Relay: the
// baselines' relays and the scenarios' routers; Command.Profiled: a load generator with the
// SDK embedded, one profile per measurement, loadgen-throughput, loadgen-echo and
// loadgen-setup) are started with ProfileEnv and HeapEnv, and
// with Options.Trace TraceEnv, naming files in that directory (<scenario>.<process>.cpu.pprof,
// <scenario>.<process>.heap.pprof, <scenario>.<process>.trace); a process that calls
// StartProfiling writes a CPU profile of its life, heap profiles while it runs and at its end,
// and an execution trace there. The bench's relays do, and so does the test binary
// when it acts as `zmesh router run`: TestProfileZmesh runs a scenario that way and leaves
// the profiles (see its comment). Skipping the circuit setup and idle circuit measurements
// leaves the profiles mostly to the throughput measurement. `zmesh router run` writes no
// profile unless it calls StartProfiling too.
//
// # Adding a scenario
//
// A scenario implements Scenario (or is built with Define): a Name, the name of the Baseline
// it is compared with (BaselineProxy for one router, BaselineTLSRelay for two routers over a
// tls: or quic: link), and Setup. Setup receives an Env whose Sink is the address its path
// must end at and whose Dir is a fresh directory for its files; it starts its processes with
// Env.Start — Command{Args: {"router", "run", file}, Relay: true} for a router, whose
// readiness it then awaits with Process.WaitOutput or WaitListening (FreeAddr picks ports to
// write into configuration) — and returns the Target whose 127.0.0.1 Addr the load generator
// connects to, with an optional Teardown, and Circuits and IdleRouters for the circuit
// measurements. The harness stops every process started through Env after Teardown. The
// scenario is then added to the list the zmesh bench command passes as Options.Scenarios;
// --scenarios NAME runs it together with its baseline, and the table shows its figures as
// ratios to the baseline's.
package bench
