package resolver

import "sync/atomic"

// Stats is a snapshot of a Resolver's counters, for metrics. Every query answered counts
// once, in one of the query counters.
type Stats struct {
	Intercepted uint64 // A queries for intercepted names, answered with their address
	EmptyAAAA   uint64 // AAAA queries for intercepted names, answered NOERROR without records
	EmptyOther  uint64 // other queries for intercepted names, answered NOERROR without records
	Forwarded   uint64 // queries answered with an upstream's reply
	Refused     uint64 // queries not intercepted that no upstream answered
	ServFail    uint64 // queries for names under a wildcard that could not get an address
	Rejected    uint64 // queries not supported (opcode other than QUERY, not one question)

	Assignments int // names holding an address now
}

// Queries returns the number of queries answered.
func (s Stats) Queries() uint64 {
	return s.Intercepted + s.EmptyAAAA + s.EmptyOther + s.Forwarded + s.Refused + s.ServFail + s.Rejected
}

type counters struct {
	intercepted, emptyAAAA, emptyOther, forwarded, refused, servFail, rejected atomic.Uint64
}

// Stats returns the counters of r.
func (r *Resolver) Stats() Stats {
	r.mu.RLock()
	n := len(r.byIP)
	r.mu.RUnlock()
	c := &r.counters
	return Stats{
		Intercepted: c.intercepted.Load(),
		EmptyAAAA:   c.emptyAAAA.Load(),
		EmptyOther:  c.emptyOther.Load(),
		Forwarded:   c.forwarded.Load(),
		Refused:     c.refused.Load(),
		ServFail:    c.servFail.Load(),
		Rejected:    c.rejected.Load(),
		Assignments: n,
	}
}
