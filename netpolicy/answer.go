package netpolicy

import (
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// keptAddr is an address answer the forwarder hands out.
type keptAddr struct {
	addr netip.Addr
	ttl  uint32 // seconds, as answered
}

// filtered is an upstream answer after the policy: the records the client
// gets, the addresses among them, and the addresses stripped.
type filtered struct {
	msg      *dns.Msg // Rcode, Answer, Ns (SOA only); no Extra
	kept     []keptAddr
	stripped []netip.Addr
}

func (fl *filtered) addrs() []netip.Addr {
	out := make([]netip.Addr, 0, len(fl.kept))
	for _, k := range fl.kept {
		out = append(out, k.addr)
	}
	return out
}

// cacheTTL is how long the answer may be cached: the smallest TTL of its
// records, 0 (do not cache) for negative answers.
func (fl *filtered) cacheTTL() time.Duration {
	if fl.msg.Rcode != dns.RcodeSuccess || len(fl.msg.Answer) == 0 {
		return 0
	}
	ttl := fl.msg.Answer[0].Header().Ttl
	for _, rr := range fl.msg.Answer[1:] {
		ttl = min(ttl, rr.Header().Ttl)
	}
	return time.Duration(ttl) * time.Second
}

// filterAnswer applies the policy to an upstream answer for name and qtype,
// allowed by rules:
//
//   - Answer keeps the CNAME chain from name and, at its names, the
//     records of the asked type; anything else (records of other names,
//     RRSIGs, A and AAAA records in answers to other types) goes.
//   - A and AAAA answers in special ranges (IsSpecialAddr) are stripped
//     unless a rule allows private answers.
//   - SVCB and HTTPS records lose their ipv4hint and ipv6hint parameters
//     (addresses that would bypass the A/AAAA path); the records stay.
//   - The authority section keeps SOA records (negative caching), the
//     additional section goes (glue addresses too).
func filterAnswer(up *dns.Msg, name string, qtype uint16, rules []HostRule) *filtered {
	fl := &filtered{msg: new(dns.Msg)}
	fl.msg.Rcode = up.Rcode
	if up.Rcode != dns.RcodeSuccess && up.Rcode != dns.RcodeNameError {
		return fl
	}
	allowPrivate := false
	for _, r := range rules {
		allowPrivate = allowPrivate || r.AllowPrivate
	}
	// The chain: names reachable from name through CNAMEs, in any order.
	owners := map[string]bool{name: true}
	for changed := true; changed; {
		changed = false
		for _, rr := range up.Answer {
			if c, ok := rr.(*dns.CNAME); ok && owners[canonicalName(c.Hdr.Name)] && !owners[canonicalName(c.Target)] {
				owners[canonicalName(c.Target)] = true
				changed = true
			}
		}
	}
	for _, rr := range up.Answer {
		h := rr.Header()
		if !owners[canonicalName(h.Name)] || h.Class != dns.ClassINET {
			continue
		}
		var addr netip.Addr
		switch rr := rr.(type) {
		case *dns.CNAME:
			fl.msg.Answer = append(fl.msg.Answer, rr)
			continue
		case *dns.A:
			addr, _ = netip.AddrFromSlice(rr.A.To4())
		case *dns.AAAA:
			addr, _ = netip.AddrFromSlice(rr.AAAA.To16())
		case *dns.SVCB:
			stripHints(&rr.Value)
		case *dns.HTTPS:
			stripHints(&rr.Value)
		}
		if h.Rrtype != qtype {
			continue
		}
		if addr.IsValid() {
			if IsSpecialAddr(addr) && !allowPrivate {
				fl.stripped = append(fl.stripped, addr)
				continue
			}
			fl.kept = append(fl.kept, keptAddr{addr: addr, ttl: h.Ttl})
		}
		fl.msg.Answer = append(fl.msg.Answer, rr)
	}
	for _, rr := range up.Ns {
		if _, ok := rr.(*dns.SOA); ok {
			fl.msg.Ns = append(fl.msg.Ns, rr)
		}
	}
	return fl
}

func stripHints(kv *[]dns.SVCBKeyValue) {
	out := (*kv)[:0]
	for _, v := range *kv {
		switch v.(type) {
		case *dns.SVCBIPv4Hint, *dns.SVCBIPv6Hint:
			continue
		}
		out = append(out, v)
	}
	*kv = out
}
