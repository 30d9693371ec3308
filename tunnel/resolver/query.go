package resolver

import (
	"context"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// answer returns the reply to req, received over network ("udp" or "tcp"): the address of
// an intercepted name, or the reply of one of upstreams. ctx bounds forwarding.
func (r *Resolver) answer(ctx context.Context, upstreams []netip.AddrPort, req *dns.Msg, network string) *dns.Msg {
	if req.Opcode != dns.OpcodeQuery {
		r.counters.rejected.Add(1)
		return new(dns.Msg).SetRcode(req, dns.RcodeNotImplemented)
	}
	if len(req.Question) != 1 {
		r.counters.rejected.Add(1)
		return new(dns.Msg).SetRcodeFormatError(req)
	}
	q := req.Question[0]
	isA := q.Qtype == dns.TypeA && q.Qclass == dns.ClassINET
	ip, intercepted, err := r.resolve(canonical(q.Name), isA)
	if !intercepted {
		return r.forward(ctx, upstreams, req, network)
	}
	if err != nil {
		r.log.Error("resolver: answering SERVFAIL", "name", q.Name, "error", err)
		r.counters.servFail.Add(1)
		return new(dns.Msg).SetRcode(req, dns.RcodeServerFailure)
	}
	m := new(dns.Msg).SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	switch {
	case isA:
		m.Answer = []dns.RR{&dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: TTL},
			A:   ip.AsSlice(),
		}}
		r.counters.intercepted.Add(1)
	case q.Qtype == dns.TypeAAAA:
		r.counters.emptyAAAA.Add(1)
	default:
		r.counters.emptyOther.Add(1)
	}
	return m
}

// forward returns the first reply to req of upstreams, tried in order within the forward
// timeout, each with an equal share of the time left. A SERVFAIL or REFUSED reply moves on
// to the next upstream and is returned only if no other reply comes. With no reply at all
// the answer is REFUSED.
func (r *Resolver) forward(ctx context.Context, upstreams []netip.AddrPort, req *dns.Msg, network string) *dns.Msg {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	out := req.Copy()
	out.Id = dns.Id() // a fresh id upstream, the client's in the reply
	client := &dns.Client{Net: network}
	var fallback *dns.Msg
	for i, up := range upstreams {
		share := time.Until(deadline) / time.Duration(len(upstreams)-i)
		tryCtx, cancelTry := context.WithTimeout(ctx, share)
		reply, _, err := client.ExchangeContext(tryCtx, out, up.String())
		cancelTry()
		if err != nil {
			r.log.Debug("resolver: upstream failed", "upstream", up, "name", req.Question[0].Name, "error", err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		reply.Id = req.Id
		if reply.Rcode == dns.RcodeServerFailure || reply.Rcode == dns.RcodeRefused {
			fallback = reply
			continue
		}
		return r.forwarded(reply, req, network)
	}
	if fallback != nil {
		return r.forwarded(fallback, req, network)
	}
	r.log.Debug("resolver: no upstream answered; refusing", "name", req.Question[0].Name, "upstreams", len(upstreams))
	r.counters.refused.Add(1)
	return new(dns.Msg).SetRcode(req, dns.RcodeRefused)
}

// forwarded counts reply and, over UDP, truncates it to the size the client accepts.
func (r *Resolver) forwarded(reply, req *dns.Msg, network string) *dns.Msg {
	if network == "udp" {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = max(size, int(opt.UDPSize()))
		}
		reply.Truncate(size)
	}
	r.counters.forwarded.Add(1)
	return reply
}
