package netpolicy

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func pr(a, b uint16) PortRange { return PortRange{First: a, Last: b} }

func TestParseAllow(t *testing.T) {
	good := []struct {
		in   string
		want CIDRRule
		back string // String(), "" = in
	}{
		{"10.0.0.0/8", CIDRRule{Prefix: netip.MustParsePrefix("10.0.0.0/8")}, ""},
		{"1.2.3.4:443", CIDRRule{Prefix: netip.MustParsePrefix("1.2.3.4/32"), Ports: []PortRange{pr(443, 443)}}, ""},
		{"1.2.3.4/32:443", CIDRRule{Prefix: netip.MustParsePrefix("1.2.3.4/32"), Ports: []PortRange{pr(443, 443)}}, "1.2.3.4:443"},
		{"192.168.1.0/24:80,443", CIDRRule{Prefix: netip.MustParsePrefix("192.168.1.0/24"), Ports: []PortRange{pr(80, 80), pr(443, 443)}}, ""},
		{"10.0.0.0/8:8000-9000/tcp", CIDRRule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []PortRange{pr(8000, 9000)}, Protocols: TCP}, ""},
		{"10.0.0.0/8:53/udp", CIDRRule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []PortRange{pr(53, 53)}, Protocols: UDP}, ""},
		{"10.0.0.0/8:*/UDP", CIDRRule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Protocols: UDP}, "10.0.0.0/8:*/udp"},
		{"2001:db8::/32", CIDRRule{Prefix: netip.MustParsePrefix("2001:db8::/32")}, ""},
		{"::1", CIDRRule{Prefix: netip.MustParsePrefix("::1/128")}, ""},
		{"::1/128", CIDRRule{Prefix: netip.MustParsePrefix("::1/128")}, "::1"},
		{"[2001:db8::/32]:80-90", CIDRRule{Prefix: netip.MustParsePrefix("2001:db8::/32"), Ports: []PortRange{pr(80, 90)}}, ""},
		{"[2001:db8::1]:443", CIDRRule{Prefix: netip.MustParsePrefix("2001:db8::1/128"), Ports: []PortRange{pr(443, 443)}}, ""},
		{"[::1]", CIDRRule{Prefix: netip.MustParsePrefix("::1/128")}, "::1"},
		{"0.0.0.0/0:443/tcp", CIDRRule{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Ports: []PortRange{pr(443, 443)}, Protocols: TCP}, ""},
	}
	for _, c := range good {
		got, err := ParseAllow(c.in)
		if err != nil {
			t.Errorf("ParseAllow(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseAllow(%q) = %+v, want %+v", c.in, got, c.want)
		}
		back := c.back
		if back == "" {
			back = c.in
		}
		if s := got.String(); s != back {
			t.Errorf("ParseAllow(%q).String() = %q, want %q", c.in, s, back)
		}
	}
	bad := []struct{ in, want string }{
		{"", "no network"},
		{"10.0.0.0/33", "not a network"},
		{"10.0.0.1/8", "host bits set in 10.0.0.1/8 (write 10.0.0.0/8)"},
		{"example.org", "use --allow-host example.org for names"},
		{"1.2.3.4:0", "bad port"},
		{"1.2.3.4:65536", "bad port"},
		{"1.2.3.4:90-80", "inverted (write 80-90)"},
		{"1.2.3.4:80/sctp", `unknown protocol "sctp"`},
		{"1.2.3.4:", "bad port"},
		{"[2001:db8::/32", "no closing ]"},
		{"[2001:db8::/32]443", "expected :PORTS after ]"},
		{"[10.0.0.0/8]:443", "brackets around an IPv4 network"},
		{"fe80::1%eth0", "zones are not allowed"},
		{"::ffff:10.0.0.0/90", "wider than the IPv4-mapped range"},
	}
	for _, c := range bad {
		_, err := ParseAllow(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseAllow(%q) = %v, want an ErrInvalid containing %q", c.in, err, c.want)
		} else if !strings.HasPrefix(err.Error(), "--allow "+c.in+": ") {
			t.Errorf("ParseAllow(%q) error %q does not name the rule", c.in, err)
		}
	}
}

func TestParseAllowHost(t *testing.T) {
	good := []struct {
		in   string
		want HostRule
	}{
		{"api.github.com", HostRule{Name: "api.github.com"}},
		{"API.GitHub.com.", HostRule{Name: "api.github.com"}},
		{"api.github.com:443", HostRule{Name: "api.github.com", Ports: []PortRange{pr(443, 443)}}},
		{"*.example.org:80,443", HostRule{Name: "*.example.org", Ports: []PortRange{pr(80, 80), pr(443, 443)}}},
		{"ntp.example.org:123/udp", HostRule{Name: "ntp.example.org", Ports: []PortRange{pr(123, 123)}, Protocols: UDP}},
		{"localhost", HostRule{Name: "localhost"}},
		{"_dmarc.example.org", HostRule{Name: "_dmarc.example.org"}},
	}
	for _, c := range good {
		got, err := ParseAllowHost(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseAllowHost(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, want string }{
		{"", "empty host name"},
		{"1.2.3.4", "is an address, not a name (use --allow 1.2.3.4"},
		{"1.2.3.4:443", "is an address"},
		{"[::1]:443", "is an address"},
		{"2001:db8::1", "is an address"},
		{"*", "wildcard"},
		{"*.org", "covers a whole top-level domain"},
		{"a.*.example.org", "a wildcard may only be the whole leftmost label"},
		{"*foo.example.org", "a wildcard may only be the whole leftmost label"},
		{"ex ample.org", `character ' '`},
		{"-a.example.org", "hyphen"},
		{"a..example.org", "empty label"},
		{"example.org:http", "bad port"},
		{strings.Repeat("a", 64) + ".org", "longer than 63"},
	}
	for _, c := range bad {
		_, err := ParseAllowHost(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseAllowHost(%q) = %v, want an ErrInvalid containing %q", c.in, err, c.want)
		}
	}
}

func TestHostRule_Matches(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"api.github.com", "api.github.com", true},
		{"api.github.com", "x.api.github.com", false},
		{"*.example.org", "a.example.org", true},
		{"*.example.org", "a.b.example.org", true},
		{"*.example.org", "example.org", false},
		{"*.example.org", "badexample.org", false},
		{"*.example.org", "a.example.org.evil", false},
	} {
		if got := (HostRule{Name: c.pattern}).Matches(c.name); got != c.want {
			t.Errorf("%s matches %s = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestParseHTTPMethods(t *testing.T) {
	h, err := ParseHTTPMethods("API.github.com=get, HEAD")
	if err != nil || !reflect.DeepEqual(h, HostMethods{Host: "api.github.com", Methods: []string{"GET", "HEAD"}}) {
		t.Fatalf("got %+v, %v", h, err)
	}
	for _, c := range []struct{ in, want string }{
		{"api.github.com", "expected HOST=METHODS"},
		{"api.github.com=", "expected HOST=METHODS"},
		{"api.github.com=GTE", `unknown HTTP method "GTE"`},
		{"api.github.com=CONNECT", `unknown HTTP method "CONNECT"`},
		{"1.2.3.4=GET", "is an address"},
	} {
		if _, err := ParseHTTPMethods(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseHTTPMethods(%q) = %v, want %q", c.in, err, c.want)
		}
	}
}

func TestPolicy_Validate(t *testing.T) {
	host := func(s string) HostRule { r, _ := ParseAllowHost(s); return r }
	cidr := func(s string) CIDRRule { r, _ := ParseAllow(s); return r }
	for _, c := range []struct {
		name string
		p    Policy
		want string // "" valid
	}{
		{"Zero", Policy{}, ""},
		{"Unrestricted", Policy{Mode: ModeUnrestricted}, ""},
		{"PolicyEmpty", Policy{Mode: ModePolicy}, ""},
		{"NoneWithRule", Policy{Allow: []CIDRRule{cidr("10.0.0.0/8")}}, "allow 10.0.0.0/8: rules need network mode policy, not none"},
		{"UnrestrictedWithHost", Policy{Mode: ModeUnrestricted, AllowHosts: []HostRule{host("a.org")}}, "allow-host a.org: rules need network mode policy, not unrestricted"},
		{"BadMode", Policy{Mode: 7}, "unknown network mode"},
		{"HostBits", Policy{Mode: ModePolicy, Allow: []CIDRRule{{Prefix: netip.MustParsePrefix("10.1.2.3/8")}}}, "write 10.0.0.0/8"},
		{"NoPrefix", Policy{Mode: ModePolicy, Allow: []CIDRRule{{}}}, "no valid network"},
		{"UpperName", Policy{Mode: ModePolicy, AllowHosts: []HostRule{{Name: "A.org"}}}, "write a.org"},
		{"Methods", Policy{Mode: ModePolicy, AllowHosts: []HostRule{host("*.github.com:443")},
			HTTP: []HostMethods{{Host: "api.github.com", Methods: []string{"GET"}}}}, ""},
		{"MethodsWildcardCovered", Policy{Mode: ModePolicy, AllowHosts: []HostRule{host("*.github.com:443")},
			HTTP: []HostMethods{{Host: "*.api.github.com", Methods: []string{"GET"}}}}, ""},
		{"MethodsNotAllowed", Policy{Mode: ModePolicy, AllowHosts: []HostRule{host("github.com")},
			HTTP: []HostMethods{{Host: "api.github.com", Methods: []string{"GET"}}}}, "no allow-host rule allows api.github.com (add --allow-host api.github.com:443"},
		{"MethodsTwice", Policy{Mode: ModePolicy, AllowHosts: []HostRule{host("a.org")},
			HTTP: []HostMethods{{Host: "a.org", Methods: []string{"GET"}}, {Host: "a.org", Methods: []string{"PUT"}}}}, "a second method rule"},
		{"MethodsLower", Policy{Mode: ModePolicy, AllowHosts: []HostRule{host("a.org")},
			HTTP: []HostMethods{{Host: "a.org", Methods: []string{"get"}}}}, "upper case"},
		{"Intercept", Policy{Mode: ModePolicy, AllowHosts: []HostRule{host("a.org")},
			HTTP: []HostMethods{{Host: "a.org", Methods: []string{"GET"}}}, HTTPIntercept: true}, ""},
		{"InterceptWithoutMethods", Policy{Mode: ModePolicy, AllowHosts: []HostRule{host("a.org")}, HTTPIntercept: true},
			"http-intercept: no HTTP method rules: interception serves only hosts with method rules (add --http-methods HOST=GET,HEAD"},
		{"InterceptUnrestricted", Policy{Mode: ModeUnrestricted, HTTPIntercept: true}, "http-intercept: rules need network mode policy, not unrestricted"},
		{"TooManyPorts", Policy{Mode: ModePolicy, Allow: []CIDRRule{{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: make([]PortRange, 17)}}}, "at most 16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want an ErrInvalid containing %q", err, c.want)
			}
		})
	}
}

func TestPolicy_Methods(t *testing.T) {
	p := Policy{HTTP: []HostMethods{
		{Host: "*.github.com", Methods: []string{"GET"}},
		{Host: "*.api.github.com", Methods: []string{"GET", "HEAD"}},
		{Host: "uploads.api.github.com", Methods: []string{"PUT"}},
	}}
	for name, want := range map[string][]string{
		"x.github.com":           {"GET"},
		"x.api.github.com":       {"GET", "HEAD"},
		"uploads.api.github.com": {"PUT"},
		"github.com":             nil,
	} {
		got, ok := p.Methods(name)
		if ok != (want != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("Methods(%s) = %v, %v; want %v", name, got, ok, want)
		}
	}
}

func TestIsSpecialAddr(t *testing.T) {
	for s, want := range map[string]bool{
		"10.0.0.5": true, "172.16.0.1": true, "192.168.1.1": true, "100.64.0.1": true, "127.0.0.2": true,
		"169.254.169.254": true, "0.0.0.0": true, "224.0.0.1": true, "255.255.255.255": true,
		"::": true, "::1": true, "fe80::1": true, "fd00::1": true, "ff02::1": true,
		"::ffff:10.0.0.1": true, "::ffff:8.8.8.8": false, "64:ff9b::a00:1": true, "64:ff9b::808:808": false,
		"2002:a00:1::": true, "2002:808:808::": false,
		"8.8.8.8": false, "1.1.1.1": false, "2606:4700::1111": false, "100.128.0.1": false, "172.32.0.1": false,
	} {
		if got := IsSpecialAddr(netip.MustParseAddr(s)); got != want {
			t.Errorf("IsSpecialAddr(%s) = %v, want %v", s, got, want)
		}
	}
}
