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
// For each scenario, in order: throughput (Options.Streams TCP connections writing
// Options.WriteSize buffers for Options.Duration, then half-closing and waiting for the sink's
// count of bytes received, which must match: a stream's rate is what arrived over the time it
// took to arrive), with Jain's fairness index over the per-stream rates; then 64-byte echo
// round trips (Options.RTTSamples, at most Options.Duration), summarised as percentiles; and
// CPU seconds per GiB, the user+system CPU time of the scenario's Relay processes read from
// /proc/<pid>/stat just before and just after the throughput measurement (so setup, echo and
// shutdown do not count; Linux only, reported as unknown elsewhere) divided by the GiB
// delivered. The load generator and sink are not counted: they are the same in every
// scenario.
//
// # Adding a scenario
//
// A scenario implements Scenario (or is built with Define): a Name, the name of the Baseline
// it is compared with (BaselineProxy for one router, BaselineTLSRelay for two routers over a
// tls: or quic: link), and Setup. Setup receives an Env whose Sink is the address its path
// must end at and whose Dir is a fresh directory for its files; it starts its processes with
// Env.Start — Command{Args: {"router", "run", file}, Relay: true} for a router, whose
// readiness it then awaits with WaitListening (FreeAddr picks ports to write into
// configuration) — and returns the Target whose 127.0.0.1 Addr the load generator connects
// to, with an optional Teardown. The harness stops every process started through Env after
// Teardown. The scenario is then added to the list the zmesh bench command passes as
// Options.Scenarios; --scenarios NAME runs it together with its baseline, and the table shows
// its figures as ratios to the baseline's.
package bench
