package netpolicy

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/cairnfs/cairn/netpolicy/cgroupbpf"
)

// ParseAllow parses an --allow value: CIDR[:PORTS].
//
//	10.0.0.0/8              a network, every port, TCP and UDP
//	1.2.3.4:443             one address, one port
//	10.0.0.0/8:53/udp       UDP only
//	192.168.1.0/24:80,443   a port list
//	2001:db8::/32           IPv6 without ports: as is
//	[2001:db8::/32]:80-90   IPv6 with ports: brackets
//	::1                     one IPv6 address (a /128)
func ParseAllow(s string) (CIDRRule, error) {
	flag := "--allow " + s
	var prefix, ports string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return CIDRRule{}, ruleErr(flag, "no closing ]", "write [2001:db8::/32]:443")
		}
		prefix, ports = s[1:end], s[end+1:]
		if ports != "" {
			var ok bool
			if ports, ok = strings.CutPrefix(ports, ":"); !ok || ports == "" {
				return CIDRRule{}, ruleErr(flag, "expected :PORTS after ]", "write [2001:db8::/32]:443")
			}
		}
	case strings.Count(s, ":") >= 2:
		prefix = s // IPv6 without brackets: no ports
	default:
		var ok bool
		if prefix, ports, ok = strings.Cut(s, ":"); ok && ports == "" {
			return CIDRRule{}, ruleErr(flag, "bad port \"\"", "write "+prefix+":443, or leave out the : for every port")
		}
	}
	r := CIDRRule{}
	var err error
	if r.Prefix, err = parsePrefix(flag, prefix); err != nil {
		return CIDRRule{}, err
	}
	if strings.HasPrefix(s, "[") && r.Prefix.Addr().Is4() {
		return CIDRRule{}, ruleErr(flag, "brackets around an IPv4 network", "write "+prefix+":PORTS")
	}
	if r.Ports, r.Protocols, err = parsePorts(flag, ports); err != nil {
		return CIDRRule{}, err
	}
	if err := r.validate(); err != nil {
		err.(*RuleError).Rule = flag
		return CIDRRule{}, err
	}
	return r, nil
}

func parsePrefix(flag, s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, ruleErr(flag, "no network", "write 10.0.0.0/8, 1.2.3.4 or [2001:db8::/32]:443")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, ruleErr(flag, "not a network: "+strings.TrimPrefix(err.Error(), "netip.ParsePrefix"),
				"write 10.0.0.0/8 or 2001:db8::/32")
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		hint := "write 10.0.0.0/8, 1.2.3.4 or [2001:db8::1]:443"
		if strings.ContainsAny(s, "abcdefghijklmnopqrstuvwxyz") && !strings.Contains(s, ":") {
			hint = "use --allow-host " + s + " for names"
		}
		return netip.Prefix{}, ruleErr(flag, "not an address or network", hint)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, ruleErr(flag, "IPv6 zones are not allowed", "drop the %"+a.Zone())
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseAllowHost parses an --allow-host value: NAME[:PORTS], where NAME is
// a DNS name or a wildcard *.SUFFIX (every name below SUFFIX, not SUFFIX
// itself). Upper case and a trailing dot are accepted and normalised.
//
//	api.github.com          every port, TCP and UDP
//	api.github.com:443
//	*.example.org:80,443
//	ntp.example.org:123/udp
func ParseAllowHost(s string) (HostRule, error) {
	flag := "--allow-host " + s
	name, ports, colon := strings.Cut(s, ":")
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") > 1 {
		return HostRule{}, ruleErr(flag, s+" is an address, not a name", "use --allow "+s+" for addresses")
	}
	if colon && ports == "" {
		return HostRule{}, ruleErr(flag, "bad port \"\"", "write "+name+":443, or leave out the : for every port")
	}
	r := HostRule{Name: canonicalName(name)}
	var err error
	if r.Ports, r.Protocols, err = parsePorts(flag, ports); err != nil {
		return HostRule{}, err
	}
	if err := r.validate(); err != nil {
		err.(*RuleError).Rule = flag
		return HostRule{}, err
	}
	return r, nil
}

// ParseHTTPMethods parses an --http-methods value: HOST=METHOD[,METHOD...],
// where HOST is a name or a wildcard as in --allow-host, and the methods are
// GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS or TRACE (any case).
//
//	api.github.com=GET,HEAD
func ParseHTTPMethods(s string) (HostMethods, error) {
	flag := "--http-methods " + s
	host, methods, ok := strings.Cut(s, "=")
	if !ok || methods == "" {
		return HostMethods{}, ruleErr(flag, "expected HOST=METHODS", "write api.github.com=GET,HEAD")
	}
	h := HostMethods{Host: canonicalName(host)}
	if err := checkName(flag, h.Host); err != nil {
		return HostMethods{}, err
	}
	for m := range strings.SplitSeq(methods, ",") {
		m = strings.ToUpper(strings.TrimSpace(m))
		if err := checkMethod(flag, m); err != nil {
			return HostMethods{}, err
		}
		h.Methods = append(h.Methods, m)
	}
	return h, nil
}

// canonicalName lower-cases a name and drops a trailing dot.
func canonicalName(s string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
}

// parsePorts parses PORTS[/PROTO]: "*" or a comma list of N and N-M, then
// optionally /tcp or /udp. "" is every port, both protocols.
func parsePorts(flag, s string) ([]PortRange, Proto, error) {
	if s == "" {
		return nil, 0, nil
	}
	var protos Proto
	if list, proto, ok := strings.Cut(s, "/"); ok {
		switch strings.ToLower(proto) {
		case "tcp":
			protos = cgroupbpf.TCP
		case "udp":
			protos = cgroupbpf.UDP
		default:
			return nil, 0, ruleErr(flag, "unknown protocol "+strconv.Quote(proto), "write /tcp or /udp, or nothing for both")
		}
		s = list
	}
	if s == "*" {
		return nil, protos, nil
	}
	var out []PortRange
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		first, err1 := parsePort(lo)
		last := first
		var err2 error
		if isRange {
			last, err2 = parsePort(hi)
		}
		if err1 != nil || err2 != nil {
			return nil, 0, ruleErr(flag, "bad port "+strconv.Quote(item), "ports are 1-65535: write 443, 80,443 or 8000-9000, optionally /tcp or /udp")
		}
		if first > last {
			return nil, 0, ruleErr(flag, "port range "+item+" is inverted", "write "+hi+"-"+lo)
		}
		out = append(out, PortRange{First: first, Last: last})
	}
	return out, protos, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
	if err != nil || n == 0 {
		return 0, strconv.ErrRange
	}
	return uint16(n), nil
}

// portsString is the PORTS[/PROTO] syntax, "" for every port and both
// protocols.
func portsString(ports []PortRange, protos Proto) string {
	var b strings.Builder
	for i, p := range ports {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.String())
	}
	switch protos {
	case cgroupbpf.TCP, cgroupbpf.UDP:
		if b.Len() == 0 {
			b.WriteByte('*')
		}
		b.WriteString("/" + protos.String())
	}
	return b.String()
}
