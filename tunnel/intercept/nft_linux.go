package intercept

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// Names of the base chains.
const (
	preroutingChain = "prerouting"
	outputChain     = "output"
)

// ruleset builds the nftables objects of one interceptor: its table, its two chains and the
// rules of its interceptions.
type ruleset struct {
	table      *nftables.Table
	pre, out   *nftables.Chain
	mark       uint32
	bypass     uint32
	tproxyAddr netip.Addr // the listeners' address; unspecified means the incoming interface's
	tcpPort    uint16
	udpPort    uint16
}

func newRuleset(o Options) *ruleset {
	t := &nftables.Table{Name: o.Table, Family: nftables.TableFamilyINet}
	return &ruleset{
		table: t,
		pre: &nftables.Chain{
			Name:     preroutingChain,
			Table:    t,
			Type:     nftables.ChainTypeFilter,
			Hooknum:  nftables.ChainHookPrerouting,
			Priority: nftables.ChainPriorityMangle,
		},
		out: &nftables.Chain{
			Name:     outputChain,
			Table:    t,
			Type:     nftables.ChainTypeRoute,
			Hooknum:  nftables.ChainHookOutput,
			Priority: nftables.ChainPriorityMangle,
		},
		mark:       o.Mark,
		bypass:     o.BypassMark,
		tproxyAddr: o.Listen.Addr(),
	}
}

// install queues the table, its chains and the bypass rules on c. The caller flushes.
func (rs *ruleset) install(c *nftables.Conn) {
	c.AddTable(rs.table)
	c.AddChain(rs.pre)
	c.AddChain(rs.out)
	for _, ch := range []*nftables.Chain{rs.pre, rs.out} {
		c.AddRule(&nftables.Rule{Table: rs.table, Chain: ch, Exprs: rs.bypassExprs()})
	}
}

// bypassExprs is "meta mark <bypass> accept".
func (rs *ruleset) bypassExprs() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(rs.bypass)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

// rules returns the prerouting and output rules of interception ic (normalized), tagged with id.
func (rs *ruleset) rules(id string, ic Interception) []*nftables.Rule {
	tag := userdata.AppendString(nil, userdata.TypeComment, id)
	var rules []*nftables.Rule
	for _, proto := range ic.Protocols {
		port := rs.tcpPort
		if proto == UDP {
			port = rs.udpPort
		}
		for _, p := range ic.Prefixes {
			for _, r := range ic.Ports {
				match := matchExprs(p, proto, r)
				rules = append(rules,
					&nftables.Rule{
						Table:    rs.table,
						Chain:    rs.pre,
						Exprs:    slices.Concat(match, rs.tproxyExprs(port), rs.markExprs()),
						UserData: tag,
					},
					&nftables.Rule{
						Table:    rs.table,
						Chain:    rs.out,
						Exprs:    slices.Concat(match, rs.markExprs()),
						UserData: tag,
					})
			}
		}
	}
	return rules
}

// matchExprs is "meta nfproto ipv4 meta l4proto <proto> ip daddr <p> <proto> dport <r>".
func matchExprs(p netip.Prefix, proto string, r PortRange) []expr.Any {
	l4 := byte(unix.IPPROTO_TCP)
	if proto == UDP {
		l4 = unix.IPPROTO_UDP
	}
	e := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{l4}},
	}
	if p.Bits() > 0 {
		// ip daddr: offset 16 of the IPv4 header.
		e = append(e, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4})
		if p.Bits() < 32 {
			e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: net.CIDRMask(p.Bits(), 32), Xor: make([]byte, 4)})
		}
		a := p.Addr().As4()
		e = append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]})
	}
	// dport: offset 2 of both the TCP and the UDP header.
	e = append(e, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
	if r.Low == r.High {
		e = append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(r.Low)})
	} else {
		e = append(e, &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: be16(r.Low), ToData: be16(r.High)})
	}
	return e
}

// tproxyExprs is "tproxy ip to <addr>:<port>".
func (rs *ruleset) tproxyExprs(port uint16) []expr.Any {
	tp := &expr.TProxy{Family: byte(nftables.TableFamilyIPv4), TableFamily: byte(rs.table.Family), RegPort: 2}
	e := []expr.Any{&expr.Immediate{Register: 2, Data: be16(port)}}
	if !rs.tproxyAddr.IsUnspecified() {
		a := rs.tproxyAddr.As4()
		e = append(e, &expr.Immediate{Register: 1, Data: a[:]})
		tp.RegAddr = 1
	}
	return append(e, tp)
}

// markExprs is "meta mark set <mark> accept".
func (rs *ruleset) markExprs() []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(rs.mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

// tagged returns the rules of both chains whose user data carries the comment id.
func (rs *ruleset) tagged(c *nftables.Conn, id string) ([]*nftables.Rule, error) {
	var found []*nftables.Rule
	for _, ch := range []*nftables.Chain{rs.pre, rs.out} {
		rules, err := c.GetRules(rs.table, ch)
		if err != nil {
			return nil, fmt.Errorf("list rules of chain %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			if tag, ok := comment(r.UserData); ok && tag == id {
				found = append(found, r)
			}
		}
	}
	return found, nil
}

// comment returns the comment TLV of rule user data. Unlike userdata.GetString it does not
// trust the lengths in the data.
func comment(udata []byte) (string, bool) {
	for len(udata) >= 2 {
		typ, n := userdata.Type(udata[0]), int(udata[1])
		if len(udata) < 2+n {
			return "", false
		}
		if typ == userdata.TypeComment {
			v := udata[2 : 2+n]
			if len(v) > 0 && v[len(v)-1] == 0 {
				v = v[:len(v)-1]
			}
			return string(v), true
		}
		udata = udata[2+n:]
	}
	return "", false
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
