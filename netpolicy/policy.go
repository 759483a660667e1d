package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cairnfs/cairn/netpolicy/cgroupbpf"
)

// Mode is how much network a sandbox gets.
type Mode uint8

const (
	// ModeNone: no network. The sandbox runs in its own network namespace
	// with only a loopback interface (the sandbox package sets that up);
	// netpolicy loads no programs and runs no forwarder. The zero value.
	ModeNone Mode = iota
	// ModePolicy: default deny. The sandbox shares the host's network
	// namespace; the cgroup BPF programs let out only what the rules allow,
	// and DNS goes through the forwarder.
	ModePolicy
	// ModeUnrestricted: everything is allowed. Explicit only; the caller
	// logs it. Start still attaches programs in audit mode when it can, so
	// that the turn's record says what was contacted.
	ModeUnrestricted
)

// ParseMode parses the --net flag's value: "none", "policy" or
// "unrestricted".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "none":
		return ModeNone, nil
	case "policy":
		return ModePolicy, nil
	case "unrestricted":
		return ModeUnrestricted, nil
	}
	return 0, ruleErr("--net "+s, "unknown network mode", "use none, policy or unrestricted")
}

func (m Mode) String() string {
	switch m {
	case ModeNone:
		return "none"
	case ModePolicy:
		return "policy"
	case ModeUnrestricted:
		return "unrestricted"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText writes the mode's name (for the audit record).
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// PortRange is an inclusive range of destination ports.
type PortRange = cgroupbpf.PortRange

// Proto is a set of transport protocols: cgroupbpf.TCP, cgroupbpf.UDP or
// both; zero means both.
type Proto = cgroupbpf.Proto

// Policy is one sandbox's egress policy: plain data, checked by Validate.
// The zero value is ModeNone.
type Policy struct {
	// Mode is how much network the sandbox gets; default ModeNone.
	Mode Mode `json:"mode"`
	// Allow is the address rules (--allow): connections to these networks
	// and ports are allowed. ModePolicy only.
	Allow []CIDRRule `json:"allow,omitempty"`
	// AllowHosts is the name rules (--allow-host): these names resolve
	// through the forwarder, and the addresses they resolve to are allowed
	// on the rule's ports for the answer's TTL (at least MinTTL).
	// ModePolicy only.
	AllowHosts []HostRule `json:"allowHosts,omitempty"`
	// HTTP is the HTTP method rules (--http-methods), enforced by the HTTP
	// proxy (netpolicy/httpproxy): requests to these hosts may only use
	// these methods. Each host must be allowed by an AllowHosts rule.
	// ModePolicy only.
	HTTP []HostMethods `json:"http,omitempty"`
	// HTTPIntercept has the HTTP proxy terminate the sandbox's TLS to the
	// hosts with method rules (--http-intercept), with a CA made for the
	// run and trusted by the sandbox only, so that their methods can be
	// enforced over HTTPS too. Without it, HTTPS to those hosts is denied.
	// Needs HTTP rules. Default false. ModePolicy only.
	HTTPIntercept bool `json:"httpIntercept,omitempty"`
}

// CIDRRule allows connections to a network (--allow CIDR[:PORTS]).
type CIDRRule struct {
	// Prefix is the network; an address alone is a /32 or /128. Host bits
	// must be zero.
	Prefix netip.Prefix `json:"cidr"`
	// Ports is the destination ports; empty means all.
	Ports []PortRange `json:"ports,omitempty"`
	// Protocols is TCP, UDP or both; zero means both.
	Protocols Proto `json:"protocols,omitempty"`
}

// String is the rule in --allow syntax.
func (r CIDRRule) String() string {
	p := r.Prefix.String()
	if r.Prefix.IsSingleIP() {
		p = r.Prefix.Addr().String()
	}
	ports := portsString(r.Ports, r.Protocols)
	if ports == "" {
		return p
	}
	if r.Prefix.Addr().Is6() {
		p = "[" + p + "]"
	}
	return p + ":" + ports
}

// HostRule allows a name and the addresses it resolves to
// (--allow-host NAME[:PORTS]).
type HostRule struct {
	// Name is a DNS name ("api.github.com") or a wildcard ("*.example.org")
	// that matches every name below the suffix at any depth
	// (a.example.org, a.b.example.org) but not the suffix itself
	// (example.org needs its own rule). Lower case, no trailing dot.
	Name string `json:"name"`
	// Ports is the destination ports allowed on the resolved addresses;
	// empty means all.
	Ports []PortRange `json:"ports,omitempty"`
	// Protocols is TCP, UDP or both; zero means both.
	Protocols Proto `json:"protocols,omitempty"`
	// AllowPrivate keeps answers in private, loopback, link-local,
	// CGNAT, unique-local, unspecified and multicast ranges, which the
	// forwarder otherwise strips (DNS rebinding). Default false.
	AllowPrivate bool `json:"allowPrivateAnswers,omitempty"`
}

// String is the rule in --allow-host syntax.
func (r HostRule) String() string {
	s := r.Name
	if ports := portsString(r.Ports, r.Protocols); ports != "" {
		s += ":" + ports
	}
	return s
}

// Matches reports whether the rule allows name (lower case, no trailing
// dot).
func (r HostRule) Matches(name string) bool {
	return nameMatches(r.Name, name)
}

// HostMethods restricts the HTTP methods for a host (--http-methods
// HOST=METHOD,...): the HTTP proxy lets through requests to Host with one
// of Methods and refuses the rest.
type HostMethods struct {
	// Host is a name or a wildcard, as HostRule.Name.
	Host string `json:"host"`
	// Methods is the allowed methods, upper case (GET, HEAD...).
	Methods []string `json:"methods"`
}

// Matches reports whether the rule is about name (lower case, no trailing
// dot).
func (h HostMethods) Matches(name string) bool { return nameMatches(h.Host, name) }

// String is the rule in --http-methods syntax.
func (h HostMethods) String() string { return h.Host + "=" + strings.Join(h.Methods, ",") }

// HostRules returns the rules that allow name (lower case, no trailing
// dot), in policy order.
func (p Policy) HostRules(name string) []HostRule {
	var out []HostRule
	for _, r := range p.AllowHosts {
		if r.Matches(name) {
			out = append(out, r)
		}
	}
	return out
}

// Methods returns the HTTP methods allowed for name and whether a method
// rule covers it. An exact rule wins over wildcards; among wildcards the
// longest suffix wins.
func (p Policy) Methods(name string) ([]string, bool) {
	best := -1
	for i, h := range p.HTTP {
		if !h.Matches(name) {
			continue
		}
		if best < 0 || specificity(h.Host) > specificity(p.HTTP[best].Host) {
			best = i
		}
	}
	if best < 0 {
		return nil, false
	}
	return p.HTTP[best].Methods, true
}

func specificity(pattern string) int {
	if strings.HasPrefix(pattern, "*.") {
		return len(pattern) - 2
	}
	return 1 << 16
}

func nameMatches(pattern, name string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return len(name) > len(suffix)+1 && strings.HasSuffix(name, suffix) && name[len(name)-len(suffix)-1] == '.'
	}
	return pattern == name
}

// Validate reports the first problem of the policy as a *RuleError naming
// the rule and what to write instead.
func (p Policy) Validate() error {
	if p.Mode > ModeUnrestricted {
		return ruleErr("mode "+p.Mode.String(), "unknown network mode", "use none, policy or unrestricted")
	}
	if p.Mode != ModePolicy {
		var first string
		switch {
		case len(p.Allow) > 0:
			first = "allow " + p.Allow[0].String()
		case len(p.AllowHosts) > 0:
			first = "allow-host " + p.AllowHosts[0].String()
		case len(p.HTTP) > 0:
			first = "http-methods " + p.HTTP[0].String()
		case p.HTTPIntercept:
			first = "http-intercept"
		}
		if first != "" {
			return ruleErr(first, "rules need network mode policy, not "+p.Mode.String(),
				"drop the rule, or use --net policy (mode: policy in a file)")
		}
		return nil
	}
	for _, r := range p.Allow {
		if err := r.validate(); err != nil {
			return err
		}
	}
	for _, r := range p.AllowHosts {
		if err := r.validate(); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, h := range p.HTTP {
		name := "http-methods " + h.String()
		if err := checkName(name, h.Host); err != nil {
			return err
		}
		if seen[h.Host] {
			return ruleErr(name, "a second method rule for "+h.Host, "list every method in one rule")
		}
		seen[h.Host] = true
		if len(h.Methods) == 0 {
			return ruleErr(name, "no methods", "write HOST=GET,HEAD")
		}
		for _, m := range h.Methods {
			if err := checkMethod(name, m); err != nil {
				return err
			}
		}
		if !p.coversHost(h.Host) {
			return ruleErr(name, "no allow-host rule allows "+h.Host,
				"add --allow-host "+h.Host+":443 (method rules restrict allowed hosts; they allow nothing)")
		}
	}
	if p.HTTPIntercept && len(p.HTTP) == 0 {
		return ruleErr("http-intercept", "no HTTP method rules: interception serves only hosts with method rules",
			"add --http-methods HOST=GET,HEAD (http: in a policy file), or drop --http-intercept")
	}
	return nil
}

// coversHost reports whether an AllowHosts rule allows every name host
// (a name or a wildcard) matches.
func (p Policy) coversHost(host string) bool {
	for _, r := range p.AllowHosts {
		if r.Name == host {
			return true
		}
		if strings.HasPrefix(r.Name, "*.") {
			probe := strings.TrimPrefix(host, "*.")
			if nameMatches(r.Name, probe) {
				return true
			}
		}
	}
	return false
}

func (r CIDRRule) validate() error {
	name := "allow " + r.String()
	if !r.Prefix.IsValid() {
		return ruleErr("allow rule", "no valid network", "write 10.0.0.0/8, 1.2.3.4 or 2001:db8::/32")
	}
	if r.Prefix.Addr().Zone() != "" {
		return ruleErr(name, "IPv6 zones are not allowed", "drop the %zone")
	}
	if r.Prefix.Addr().Is4In6() && r.Prefix.Bits() < 96 {
		return ruleErr(name, "prefix wider than the IPv4-mapped range", "write the IPv4 network instead")
	}
	if m := r.Prefix.Masked(); m != r.Prefix {
		return ruleErr(name, "host bits set in "+r.Prefix.String(), "write "+m.String())
	}
	return checkPorts(name, r.Ports, r.Protocols)
}

func (r HostRule) validate() error {
	name := "allow-host " + r.String()
	if err := checkName(name, r.Name); err != nil {
		return err
	}
	return checkPorts(name, r.Ports, r.Protocols)
}

func checkPorts(name string, ports []PortRange, protos Proto) error {
	if protos&^cgroupbpf.AnyProto != 0 {
		return ruleErr(name, "unknown protocol", "use tcp, udp, or neither for both")
	}
	if len(ports) > cgroupbpf.MaxPortRanges {
		return ruleErr(name, fmt.Sprintf("%d port ranges; a rule holds at most %d", len(ports), cgroupbpf.MaxPortRanges),
			"merge them into ranges like 8000-9000")
	}
	for _, pr := range ports {
		if pr.First > pr.Last {
			return ruleErr(name, fmt.Sprintf("port range %d-%d is inverted", pr.First, pr.Last), fmt.Sprintf("write %d-%d", pr.Last, pr.First))
		}
		if pr.First == 0 && pr != cgroupbpf.AllPorts {
			return ruleErr(name, "port 0", "ports are 1-65535; omit the ports to allow all")
		}
	}
	return nil
}

// checkName checks a DNS name or wildcard as written in a rule.
func checkName(rule, s string) error {
	if s == "" {
		return ruleErr(rule, "empty host name", "write a name like api.github.com or *.example.org")
	}
	if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return ruleErr(rule, s+" is an address, not a name", "use --allow "+s+" for addresses")
	}
	if _, err := netip.ParsePrefix(s); err == nil {
		return ruleErr(rule, s+" is a network, not a name", "use --allow "+s+" for networks")
	}
	if s != strings.ToLower(s) || strings.HasSuffix(s, ".") {
		return ruleErr(rule, "name "+s+" is not in canonical form", "write "+strings.TrimSuffix(strings.ToLower(s), "."))
	}
	labels := strings.Split(s, ".")
	if labels[0] == "*" {
		labels = labels[1:]
		if len(labels) < 2 {
			return ruleErr(rule, "wildcard "+s+" covers a whole top-level domain", "name a domain: *.example.org")
		}
	}
	if len(s) > 253 {
		return ruleErr(rule, "name longer than 253 characters", "")
	}
	for _, l := range labels {
		if l == "*" || strings.Contains(l, "*") {
			return ruleErr(rule, "a wildcard may only be the whole leftmost label", "write *.example.org")
		}
		if l == "" || len(l) > 63 {
			return ruleErr(rule, "empty label or label longer than 63 characters in "+s, "")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return ruleErr(rule, "label "+l+" starts or ends with a hyphen", "")
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return ruleErr(rule, fmt.Sprintf("character %q in name %s", c, s), "names are letters, digits, - and _")
			}
		}
	}
	return nil
}

// httpMethods is the methods a method rule may name. CONNECT is not one:
// hosts without method rules are tunnelled, hosts with them are not.
var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"}

func checkMethod(rule, m string) error {
	if !slices.Contains(httpMethods, m) {
		return ruleErr(rule, fmt.Sprintf("unknown HTTP method %q", m), "use "+strings.Join(httpMethods, ", ")+" (upper case)")
	}
	return nil
}

// The protocols, for rules built in Go.
const (
	TCP = cgroupbpf.TCP
	UDP = cgroupbpf.UDP
)
