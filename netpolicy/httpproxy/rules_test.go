package httpproxy

import (
	"errors"
	"testing"
)

func TestRuleSet_Match(t *testing.T) {
	rs := newRuleSet([]HostRule{
		{Host: "*.example.com", Methods: []string{"GET"}},
		{Host: "*.b.example.com", Methods: []string{"PUT"}},
		{Host: "API.Example.com.", Methods: []string{"post"}, Ports: []uint16{443}},
		{Host: "api.example.com", Methods: []string{"DELETE"}, Ports: []uint16{8443}},
		{Host: "any.example.org"},
		{Host: "[2001:db8::1]", Methods: []string{"GET"}},
	})
	for _, tc := range []struct {
		host, method string
		port         uint16
		ruled, ok    bool
	}{
		{"x.example.com", "GET", 80, true, true},
		{"x.example.com", "POST", 80, true, false},
		{"example.com", "GET", 80, false, false}, // a wildcard covers names below only
		{"notexample.com", "GET", 80, false, false},
		{"a.b.example.com", "PUT", 80, true, true}, // the longest suffix decides
		{"a.b.example.com", "GET", 80, true, false},
		{"api.example.com", "POST", 443, true, true}, // the exact name decides, its rules add up
		{"api.example.com", "DELETE", 8443, true, true},
		{"api.example.com", "DELETE", 443, true, false},
		{"api.example.com", "GET", 443, true, false},
		{"any.example.org", "PATCH", 1, true, true},
		{"2001:db8::1", "GET", 443, true, true},
	} {
		h := rs.match(tc.host)
		if (h != nil) != tc.ruled {
			t.Errorf("match(%s): ruled %v, want %v", tc.host, h != nil, tc.ruled)
			continue
		}
		if h != nil && h.allowed(tc.method, tc.port) != tc.ok {
			t.Errorf("%s %s:%d: allowed %v, want %v", tc.method, tc.host, tc.port, !tc.ok, tc.ok)
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	if err := (&Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	good := Config{Rules: []HostRule{{Host: "*.example.org", Methods: []string{"GET", "HEAD"}, Ports: []uint16{443}}, {Host: "10.0.0.1"}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid Config: %v", err)
	}
	for name, c := range map[string]Config{
		"EmptyHost":      {Rules: []HostRule{{Host: ""}}},
		"InnerWildcard":  {Rules: []HostRule{{Host: "a.*.example.org"}}},
		"BareWildcard":   {Rules: []HostRule{{Host: "*"}}},
		"HostWithPort":   {Rules: []HostRule{{Host: "example.org:443"}}},
		"BadMethod":      {Rules: []HostRule{{Host: "example.org", Methods: []string{"GE T"}}}},
		"ConnectMethod":  {Rules: []HostRule{{Host: "example.org", Methods: []string{"connect"}}}},
		"PortZero":       {Rules: []HostRule{{Host: "example.org", Ports: []uint16{0}}}},
		"NegativeTimout": {IdleTimeout: -1},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
		if _, err := New(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
	}
}
