package cgroupbpf

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func TestMergePermanent(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []portEntry
		want []portEntry
	}{
		{"Empty", nil, nil},
		{"OverlapAndAdjacent",
			[]portEntry{{first: 80, last: 90, protos: TCP}, {first: 85, last: 100, protos: TCP}, {first: 101, last: 101, protos: TCP}, {first: 443, last: 443, protos: TCP}},
			[]portEntry{{first: 80, last: 101, protos: TCP}, {first: 443, last: 443, protos: TCP}}},
		{"BothProtocolsShareARange",
			[]portEntry{{first: 53, last: 53, protos: UDP}, {first: 53, last: 53, protos: TCP}, {first: 443, last: 443, protos: AnyProto}},
			[]portEntry{{first: 53, last: 53, protos: AnyProto}, {first: 443, last: 443, protos: AnyProto}}},
		{"DifferentRangesPerProtocol",
			[]portEntry{{first: 80, last: 90, protos: TCP}, {first: 85, last: 100, protos: UDP}},
			[]portEntry{{first: 80, last: 90, protos: TCP}, {first: 85, last: 100, protos: UDP}}},
		{"AllPortsAbsorbs",
			[]portEntry{{first: 0, last: 65535, protos: AnyProto}, {first: 80, last: 80, protos: TCP}},
			[]portEntry{{first: 0, last: 65535, protos: AnyProto}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergePermanent(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMergeExpiring(t *testing.T) {
	in := []portEntry{
		{first: 443, last: 443, protos: TCP, expires: 100},
		{first: 443, last: 443, protos: TCP, expires: 300}, // extends
		{first: 80, last: 80, protos: TCP, expires: 50},    // expired at 60
		{first: 443, last: 443, protos: UDP, expires: 200}, // another protocol: its own
	}
	want := []portEntry{{first: 443, last: 443, protos: TCP, expires: 300}, {first: 443, last: 443, protos: UDP, expires: 200}}
	if got := mergeExpiring(in, 60); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestRuleSet_Add(t *testing.T) {
	s := newRuleSet()
	p8, p16, p24 := netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.1.2.0/24")
	if _, _, err := s.add(p16, ruleEntries([]PortRange{Port(80)}, TCP, 0)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.add(p24, ruleEntries([]PortRange{Port(22)}, TCP, 0)); err != nil {
		t.Fatal(err)
	}
	// The /8 changes the /8 (new, first) and the /16 and /24 inside it.
	changed, _, err := s.add(p8, ruleEntries([]PortRange{Port(443)}, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	got := map[netip.Prefix][]portEntry{}
	for _, c := range changed {
		got[c.prefix] = c.entries
	}
	want := map[netip.Prefix][]portEntry{
		p8:  {{first: 443, last: 443, protos: AnyProto}},
		p16: {{first: 80, last: 80, protos: TCP}, {first: 443, last: 443, protos: AnyProto}},
		p24: {{first: 22, last: 22, protos: TCP}, {first: 80, last: 80, protos: TCP}, {first: 443, last: 443, protos: AnyProto}},
	}
	if changed[0].prefix != p8 || !reflect.DeepEqual(got, want) {
		t.Errorf("changed %v, want %v with %v first", changed, want, p8)
	}
	// A sibling is untouched.
	other := netip.MustParsePrefix("192.168.0.0/16")
	if changed, _, err := s.add(other, ruleEntries(nil, 0, 0)); err != nil || len(changed) != 1 {
		t.Errorf("add %v: %v, %v", other, changed, err)
	}

	// Overflow through a containing prefix: refused, state unchanged.
	var many []PortRange
	for i := range MaxPortRanges - 1 {
		many = append(many, Port(uint16(1000+2*i)))
	}
	before := len(s.rules[p8])
	if _, _, err := s.add(p8, ruleEntries(many, TCP, 0)); !errors.Is(err, ErrFull) {
		t.Fatalf("overflow: %v, want ErrFull", err)
	}
	if len(s.rules[p8]) != before {
		t.Errorf("the refused rule changed the set")
	}
	// undo forgets a new prefix.
	p32 := netip.MustParsePrefix("10.9.9.9/32")
	_, undo, err := s.add(p32, ruleEntries(nil, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	undo()
	if _, ok := s.rules[p32]; ok {
		t.Errorf("undo kept %v", p32)
	}
}

func TestNormalPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3/8":             "10.0.0.0/8",
		"::ffff:10.0.0.0/104":    "10.0.0.0/8",
		"::ffff:1.2.3.4/128":     "1.2.3.4/32",
		"2001:db8::1/32":         "2001:db8::/32",
		"::1/128":                "::1/128",
		"0.0.0.0/0":              "0.0.0.0/0",
		"::ffff:0.0.0.0/96":      "0.0.0.0/0",
		"2001:db8:ffff::1/48":    "2001:db8:ffff::/48",
		"::ffff:192.168.1.1/120": "192.168.1.0/24",
	} {
		if got := normalPrefix(netip.MustParsePrefix(in)).String(); got != want {
			t.Errorf("normalPrefix(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	dns := netip.MustParseAddrPort("127.0.0.1:5353")
	dns6 := netip.MustParseAddrPort("[::1]:5353")
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"Zero", Config{}, true},
		{"Policy", Config{Mode: ModePolicy, DNS: dns, DNS6: dns6}, true},
		{"MappedDNS", Config{Mode: ModePolicy, DNS: netip.MustParseAddrPort("[::ffff:127.0.0.1]:53")}, true},
		{"UnknownMode", Config{Mode: 7}, false},
		{"DNSWithDenyAll", Config{DNS: dns}, false},
		{"DNSNotIPv4", Config{Mode: ModePolicy, DNS: dns6}, false},
		{"DNS6NotIPv6", Config{Mode: ModePolicy, DNS6: dns}, false},
		{"DNS6Mapped", Config{Mode: ModePolicy, DNS6: netip.MustParseAddrPort("[::ffff:127.0.0.1]:53")}, false},
		{"DNSPortZero", Config{Mode: ModePolicy, DNS: netip.MustParseAddrPort("127.0.0.1:0")}, false},
		{"EventBufferNotPowerOfTwo", Config{EventBufferBytes: 5000}, false},
		{"EventBufferSmall", Config{EventBufferBytes: 1024}, false},
		{"NegativeMax", Config{MaxRules: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.ok && err != nil {
				t.Errorf("Validate: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate: %v, want ErrInvalid", err)
			}
		})
	}
}

func TestRule_Validate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Rule
		ok   bool
	}{
		{"Host", Rule{Prefix: netip.MustParsePrefix("1.2.3.4/32"), Ports: []PortRange{{80, 90}}}, true},
		{"AllIPv6", Rule{Prefix: netip.MustParsePrefix("::/0")}, true},
		{"Mapped", Rule{Prefix: netip.MustParsePrefix("::ffff:10.0.0.0/104")}, true},
		{"Invalid", Rule{}, false},
		{"WiderThanMapped", Rule{Prefix: netip.MustParsePrefix("::ffff:0.0.0.0/95")}, false},
		{"Inverted", Rule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []PortRange{{90, 80}}}, false},
		{"OtherProtocol", Rule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Protocols: 4}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if tc.ok && err != nil {
				t.Errorf("Validate: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate: %v, want ErrInvalid", err)
			}
		})
	}
}
