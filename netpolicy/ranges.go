package netpolicy

import "net/netip"

// specialPrefixes are the ranges whose presence in a public name's answer
// is a DNS rebinding attempt (or a mistake): the forwarder strips such
// answers unless the host rule has AllowPrivate.
var specialPrefixes = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // "this network", 0.0.0.0 reaches the local host
		"10.0.0.0/8",     // RFC 1918
		"100.64.0.0/10",  // CGNAT, RFC 6598
		"127.0.0.0/8",    // loopback
		"169.254.0.0/16", // link-local, cloud metadata (169.254.169.254)
		"172.16.0.0/12",  // RFC 1918
		"192.0.0.0/24",   // IETF protocol assignments
		"192.168.0.0/16", // RFC 1918
		"198.18.0.0/15",  // benchmarking
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, broadcast
		"::/96",          // unspecified, loopback, IPv4-compatible
		"fc00::/7",       // unique local
		"fe80::/10",      // link-local
		"fec0::/10",      // site-local (deprecated)
		"ff00::/8",       // multicast
		"2001:db8::/32",  // documentation
		"100::/64",       // discard
		"64:ff9b:1::/48", // local-use NAT64
		"2001::/32",      // Teredo
		"5f00::/16",      // SRv6 SIDs
		"3fff::/20",      // documentation
		"2001:2::/48",    // benchmarking
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixto4 = netip.MustParsePrefix("2002::/16")
)

// IsSpecialAddr reports whether a is in a private, loopback, link-local,
// CGNAT, unique-local, unspecified, multicast or otherwise non-public
// range, which the forwarder strips from answers unless the host rule
// allows private answers. IPv4-mapped, NAT64 (64:ff9b::/96) and 6to4
// addresses are judged by the IPv4 address they embed; 2002::/16 and
// 64:ff9b::/96 with a public IPv4 address inside are public.
func IsSpecialAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			return IsSpecialAddr(netip.AddrFrom4([4]byte(b[12:16])))
		case sixto4.Contains(a):
			return IsSpecialAddr(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	for _, p := range specialPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
