package netpolicy

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
)

// startSession starts a session, closed at the end of the test.
func startSession(t *testing.T, cfg Config) *Session {
	t.Helper()
	s, err := Start(context.Background(), cfg)
	if errors.Is(err, ErrNotSupported) {
		skipOrFail(t, "egress policy not supported here: "+err.Error())
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// dest is the part of a Destination the tests compare.
type dest struct {
	Addr    string
	Proto   string
	Verdict string
	Count   uint64
	Names   string
}

func dests(a Audit) []dest {
	var out []dest
	for _, d := range a.Destinations {
		names := ""
		for i, n := range d.Names {
			if i > 0 {
				names += ","
			}
			names += n
		}
		out = append(out, dest{netip.AddrPortFrom(d.Addr, d.Port).String(), d.Protocol, d.Verdict, d.Count, names})
	}
	return out
}

func TestSession_Policy(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t)
	up := startUpstream(t)
	allowed := tcpEcho(t, "127.0.0.2:0")
	port := strconv.Itoa(int(allowed.Port()))
	tcpEcho(t, "127.0.0.3:"+port) // same service, address not from DNS
	tcpEcho(t, "127.0.0.4:"+port) // allowed by an address rule
	var p Policy
	p.Mode = ModePolicy
	for _, s := range []string{"127.0.0.4:" + port + "/tcp"} {
		r, err := ParseAllow(s)
		if err != nil {
			t.Fatal(err)
		}
		p.Allow = append(p.Allow, r)
	}
	p.AllowHosts = []HostRule{
		mustHost(t, "allowed.test:"+port, true), // 127.0.0.2 is loopback: opt in
		mustHost(t, "rebind.test:"+port, false),
		mustHost(t, "meta.test", false),
		mustHost(t, "mixed.test:443/tcp", false), // 198.51.100.7 and 10.0.0.6
	}
	s := startSession(t, Config{
		Policy:     p,
		CgroupPath: cg,
		BPFFS:      bpffsDir(t),
		PinName:    "session",
		Upstreams:  []string{up.addr},
		Logf:       t.Logf,
	})
	has6 := s.Forwarder().Addr6().IsValid()
	ops := []op{
		{Kind: "dns-udp", Name: "allowed.test.", Server: "127.0.0.53:53"},
		{Kind: "dns-tcp", Name: "allowed.test.", Server: "127.0.0.53:53"},
		{Kind: "connect", Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), allowed.Port()).String()},
		{Kind: "connect", Addr: "127.0.0.2:" + strconv.Itoa(int(allowed.Port())^1)}, // allowed name, other port
		{Kind: "dns-udp", Name: "denied.test.", Server: "127.0.0.53:53"},
		{Kind: "connect", Addr: "127.0.0.3:" + port}, // the IP literal, not resolved
		{Kind: "dns-udp", Name: "rebind.test.", Server: "127.0.0.53:53"},
		{Kind: "dns-tcp", Name: "meta.test.", Server: "127.0.0.53:53"},
		{Kind: "connect", Addr: "127.0.0.4:" + port},
		{Kind: "dns-udp", Name: "mixed.test.", Server: "127.0.0.53:53"},
	}
	if has6 {
		ops = append(ops, op{Kind: "dns-udp", Name: "allowed.test.", Server: "[::1]:53"})
	}
	res := child(t, cg, ops...)
	want := []result{
		{Rcode: "NOERROR", Answers: []string{"127.0.0.2"}, From: "127.0.0.53:53"},
		{Rcode: "NOERROR", Answers: []string{"127.0.0.2"}},
		{Reply: "ok:hello"},
		{Err: "EPERM"},
		{Rcode: "REFUSED", From: "127.0.0.53:53"},
		{Err: "EPERM"},
		{Rcode: "NOERROR", From: "127.0.0.53:53"}, // 10.0.0.5 stripped
		{Rcode: "NOERROR"},                        // 169.254.169.254 stripped
		{Reply: "ok:hello"},
		{Rcode: "NOERROR", Answers: []string{"198.51.100.7"}, From: "127.0.0.53:53"}, // 10.0.0.6 stripped
	}
	if has6 {
		want = append(want, result{Rcode: "NOERROR", Answers: []string{"127.0.0.2"}, From: "[::1]:53"})
	} else {
		t.Log("no IPv6 loopback: the IPv6 redirect is not tested")
	}
	for i := range want {
		if !reflect.DeepEqual(res[i], want[i]) {
			t.Errorf("op %d %+v: got %+v, want %+v", i, ops[i], res[i], want[i])
		}
	}
	if n := up.count("denied.test."); n != 0 {
		t.Errorf("a refused name was sent upstream")
	}
	// Which addresses the answers put in the map, seen from a route-less
	// network namespace: allowed ones fail in routing (ENETUNREACH), the
	// others in the programs (EPERM). Nothing can leave that namespace.
	netnsOps := []op{
		{Kind: "connect", Addr: "198.51.100.7:443"},  // answered for mixed.test
		{Kind: "connect", Addr: "198.51.100.7:8443"}, // not the rule's port
		{Kind: "connect", Addr: "10.0.0.6:443"},      // stripped from mixed.test
		{Kind: "connect", Addr: "10.0.0.5:" + port},  // stripped from rebind.test
		{Kind: "connect", Addr: "169.254.169.254:80"},
	}
	netnsWant := []string{"ENETUNREACH", "EPERM", "EPERM", "EPERM", "EPERM"}
	for i, r := range childNetns(t, cg, netnsOps...) {
		if r.Err != netnsWant[i] {
			t.Errorf("netns connect %s: %+v, want %s", netnsOps[i].Addr, r, netnsWant[i])
		}
	}

	a, err := s.Audit()
	if err != nil {
		t.Fatal(err)
	}
	udpQueries := uint64(4)
	wantDests := []dest{
		{"10.0.0.5:" + port, "tcp", "denied", 1, ""},
		{"10.0.0.6:443", "tcp", "denied", 1, ""},
		{"169.254.169.254:80", "tcp", "denied", 1, ""},
		{"198.51.100.7:443", "tcp", "allowed", 1, "mixed.test"},
		{"198.51.100.7:8443", "tcp", "denied", 1, "mixed.test"},
		{"127.0.0.2:" + port, "tcp", "allowed", 1, "allowed.test"},
		{"127.0.0.2:" + strconv.Itoa(int(allowed.Port())^1), "tcp", "denied", 1, "allowed.test"},
		{"127.0.0.3:" + port, "tcp", "denied", 1, ""},
		{"127.0.0.4:" + port, "tcp", "allowed", 1, ""},
		{"127.0.0.53:53", "tcp", "redirected", 2, ""},
		{"127.0.0.53:53", "udp", "redirected", udpQueries, ""},
	}
	if has6 {
		wantDests = append(wantDests, dest{"[::1]:53", "udp", "redirected", 1, ""})
	}
	slices.SortFunc(wantDests, func(x, y dest) int {
		ax, ay := netip.MustParseAddrPort(x.Addr), netip.MustParseAddrPort(y.Addr)
		if c := ax.Compare(ay); c != 0 {
			return c
		}
		if x.Proto < y.Proto {
			return -1
		}
		if x.Proto > y.Proto {
			return 1
		}
		return 0
	})
	if got := dests(a); !reflect.DeepEqual(got, wantDests) {
		t.Errorf("audit destinations\n got  %+v\n want %+v", got, wantDests)
	}
	type dq struct {
		Name, Type string
		Outcome    Outcome
		Count      uint64
		Answers    []netip.Addr
		Stripped   []netip.Addr
	}
	var gotDNS []dq
	for _, q := range a.DNS {
		gotDNS = append(gotDNS, dq{q.Name, q.Type, q.Outcome, q.Count, q.Answers, q.Stripped})
	}
	allowedCount := uint64(2)
	if has6 {
		allowedCount = 3
	}
	lo2 := []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	wantDNS := []dq{
		{"allowed.test", "A", OutcomeAllowed, allowedCount, lo2, nil},
		{"denied.test", "A", OutcomeRefused, 1, nil, nil},
		{"meta.test", "A", OutcomeAllowed, 1, nil, []netip.Addr{netip.MustParseAddr("169.254.169.254")}},
		{"mixed.test", "A", OutcomeAllowed, 1, []netip.Addr{netip.MustParseAddr("198.51.100.7")}, []netip.Addr{netip.MustParseAddr("10.0.0.6")}},
		{"rebind.test", "A", OutcomeAllowed, 1, nil, []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
	}
	if !reflect.DeepEqual(gotDNS, wantDNS) {
		t.Errorf("audit DNS\n got  %+v\n want %+v", gotDNS, wantDNS)
	}
	// The event reader runs concurrently: wait for the denials.
	wantDenied := []string{"127.0.0.2:" + strconv.Itoa(int(allowed.Port())^1), "127.0.0.3:" + port}
	var denied []string
	for i := 0; i < 400; i++ {
		a, _ = s.Audit()
		denied = denied[:0]
		for _, d := range a.Denials {
			denied = append(denied, d.Dst.String())
		}
		if len(denied) >= 6 && slices.Contains(denied, wantDenied[0]) && slices.Contains(denied, wantDenied[1]) {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if len(denied) != 6 || !slices.Contains(denied, wantDenied[0]) || !slices.Contains(denied, wantDenied[1]) {
		t.Errorf("denials %v, want %v", denied, wantDenied)
	}

	// Close: detached and unpinned; the audit stays readable.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.pinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory %s after Close: %v", s.pinDir, err)
	}
	after, err := s.Audit()
	if err != nil || !reflect.DeepEqual(dests(after), dests(a)) {
		t.Errorf("audit after Close: %v, %+v", err, dests(after))
	}
	if r := child(t, cg, op{Kind: "connect", Addr: "127.0.0.3:" + port}); r[0].Reply != "ok:hello" {
		t.Errorf("after Close the programs still deny: %+v", r[0])
	}
}

func TestSession_Unrestricted(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t)
	srv := tcpEcho(t, "127.0.0.3:0")
	s := startSession(t, Config{Policy: Policy{Mode: ModeUnrestricted}, CgroupPath: cg, BPFFS: bpffsDir(t)})
	if r := child(t, cg, op{Kind: "connect", Addr: srv.String()}); r[0].Reply != "ok:hello" {
		t.Fatalf("unrestricted connect: %+v", r[0])
	}
	a, err := s.Audit()
	if err != nil {
		t.Fatal(err)
	}
	if want := []dest{{srv.String(), "tcp", "allowed", 1, ""}}; !a.Audited || !reflect.DeepEqual(dests(a), want) {
		t.Fatalf("audit %+v, want %+v", dests(a), want)
	}
}

func TestSession_None(t *testing.T) {
	s, err := Start(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.Audit()
	if err != nil || a.Mode != ModeNone || a.Audited || s.Forwarder() != nil {
		t.Fatalf("got %+v, %v", a, err)
	}
}

func TestSession_FailClosed(t *testing.T) {
	up := startUpstream(t)
	// Not a cgroup2 directory: the policy cannot be enforced.
	_, err := Start(context.Background(), Config{
		Policy:     Policy{Mode: ModePolicy},
		CgroupPath: t.TempDir(),
		Upstreams:  []string{up.addr},
	})
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Start on a plain directory: %v, want ErrNotSupported", err)
	}
	// Invalid configs.
	for _, cfg := range []Config{
		{Policy: Policy{Mode: ModePolicy}},
		{Policy: Policy{Allow: []CIDRRule{{Prefix: netip.MustParsePrefix("10.0.0.0/8")}}}},
		{Policy: Policy{Mode: ModePolicy}, CgroupPath: "/x", Upstreams: []string{"dns.example:53"}},
	} {
		if _, err := Start(context.Background(), cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("Start(%+v) = %v, want ErrInvalid", cfg, err)
		}
	}
}
