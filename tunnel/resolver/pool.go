package resolver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// ErrRangeExhausted is returned (wrapped) when every address of the range is assigned.
var ErrRangeExhausted = errors.New("dnsSvcIpRange exhausted")

// pool hands out the addresses of an IPv4 range. Addresses never used yet come first, in
// ascending order; once the range has been walked, freed addresses are reused oldest-freed
// first. A freed address therefore waits until every fresh address and every address freed
// before it has been handed out again, which keeps it away from clients that still cache it
// for as long as the range allows.
//
// A pool is not safe for concurrent use; the Resolver serializes it.
type pool struct {
	next, last uint64   // next fresh address, last assignable address (next > last: none fresh)
	freed      []uint32 // freed addresses, oldest first
}

// newPool returns the pool of prefix: from the prefix's given address (the one after the
// network address when it is the network address) up to the address before the broadcast.
func newPool(prefix netip.Prefix) (*pool, error) {
	if !prefix.IsValid() {
		return nil, fmt.Errorf("dnsSvcIpRange %s is not a valid range", prefix)
	}
	if !prefix.Addr().Is4() {
		return nil, fmt.Errorf("dnsSvcIpRange %s: only IPv4 ranges are supported", prefix)
	}
	network := uint64(ip4(prefix.Masked().Addr()))
	broadcast := network | (1<<(32-prefix.Bits()) - 1)
	first := max(uint64(ip4(prefix.Addr())), network+1)
	if first > broadcast-1 {
		return nil, fmt.Errorf("dnsSvcIpRange %s holds no assignable address (the network and broadcast addresses are never assigned)", prefix)
	}
	return &pool{next: first, last: broadcast - 1}, nil
}

// take returns an unassigned address, or ErrRangeExhausted.
func (p *pool) take() (netip.Addr, error) {
	if p.next <= p.last {
		ip := uint32(p.next)
		p.next++
		return addr4(ip), nil
	}
	if len(p.freed) == 0 {
		return netip.Addr{}, ErrRangeExhausted
	}
	ip := p.freed[0]
	p.freed = p.freed[1:]
	return addr4(ip), nil
}

// put returns an address taken from p.
func (p *pool) put(ip netip.Addr) { p.freed = append(p.freed, ip4(ip)) }

func ip4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func addr4(ip uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], ip)
	return netip.AddrFrom4(b)
}
