package cgroupbpf

import (
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// expect is one op and what its result must be.
type expect struct {
	op    op
	errno string // "" success
	reply string // if set, the reply must be this
	from  string // if set, the source (recvfrom) or peer (getpeername) must be this
}

// run does the ops of cases in one child in cgroup and checks each result.
func run(t *testing.T, cgroup string, newNetns bool, cases ...expect) []result {
	t.Helper()
	ops := make([]op, len(cases))
	for i, c := range cases {
		ops[i] = c.op
	}
	res := child(t, cgroup, newNetns, ops...)
	for i, c := range cases {
		r := res[i]
		if r.Errno != c.errno {
			t.Errorf("%s %s: got %q (step %s), want %q", c.op.Kind, c.op.Addr, r.Errno, r.Step, c.errno)
			continue
		}
		if c.reply != "" && r.Reply != c.reply {
			t.Errorf("%s %s: reply %q, want %q", c.op.Kind, c.op.Addr, r.Reply, c.reply)
		}
		if c.from != "" && r.From != c.from {
			t.Errorf("%s %s: from %q, want %q", c.op.Kind, c.op.Addr, r.From, c.from)
		}
	}
	return res
}

func prefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// TestPrograms_Policy: allowed destinations get through, the others fail at
// once with EPERM, over TCP, UDP, v4-mapped IPv6, TCP Fast Open, MPTCP; raw
// sockets and IP options are dropped by the backstop.
func TestPrograms_Policy(t *testing.T) {
	needBPF(t)
	cg := newCgroup(t, "")

	a4, b4, m4 := tcpServer(t, "127.0.0.1:0"), tcpServer(t, "127.0.0.1:0"), tcpServer(t, "127.0.0.1:0")
	c4 := tcpServer(t, "127.0.0.2:0")
	a6, b6 := tcpServer(t, "[::1]:0"), tcpServer(t, "[::1]:0")
	u4, v4 := newUDPServer(t, "127.0.0.1:0"), newUDPServer(t, "127.0.0.1:0")
	u6, v6 := newUDPServer(t, "[::1]:0"), newUDPServer(t, "[::1]:0")

	load(t, Config{Mode: ModePolicy}, cg,
		Rule{Prefix: prefix(lo4), Ports: []PortRange{Port(a4.Port())}, Protocols: TCP},
		// A shorter prefix's ports apply within the longer one.
		Rule{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Ports: []PortRange{Port(m4.Port())}, Protocols: TCP},
		Rule{Prefix: prefix(lo4), Ports: []PortRange{Port(u4.addr.Port())}, Protocols: UDP},
		Rule{Prefix: prefix(lo6), Ports: []PortRange{Port(a6.Port())}, Protocols: TCP},
		Rule{Prefix: prefix(lo6), Ports: []PortRange{Port(u6.addr.Port())}, Protocols: UDP},
	)

	run(t, cg, false,
		// TCP over IPv4 and IPv6.
		expect{op: op{Kind: "tcp", Addr: a4.String(), Data: "a"}, reply: "ok:a", from: a4.String()},
		expect{op: op{Kind: "tcp", Addr: b4.String()}, errno: "EPERM"},
		expect{op: op{Kind: "tcp", Addr: c4.String()}, errno: "EPERM"},
		expect{op: op{Kind: "tcp", Addr: m4.String(), Data: "m"}, reply: "ok:m"},
		expect{op: op{Kind: "tcp", Addr: ap(lo4b, m4.Port())}, errno: "ECONNREFUSED"}, // allowed by the /8, nobody listens
		expect{op: op{Kind: "tcp", Addr: ap(lo4, u4.addr.Port())}, errno: "EPERM"},    // a UDP-only rule
		expect{op: op{Kind: "tcp", Addr: a6.String(), Data: "a6"}, reply: "ok:a6"},
		expect{op: op{Kind: "tcp", Addr: b6.String()}, errno: "EPERM"},
		// 0.0.0.0 and :: connect to the host: not an escape.
		expect{op: op{Kind: "tcp", Addr: ap(netip.IPv4Unspecified(), a4.Port())}, errno: "EPERM"},
		expect{op: op{Kind: "tcp", Addr: ap(netip.IPv6Unspecified(), a6.Port())}, errno: "EPERM"},
		// IPv4-mapped IPv6 meets the IPv4 rules.
		expect{op: op{Kind: "tcp", Addr: ap(mapped(lo4), a4.Port()), Data: "m6"}, reply: "ok:m6"},
		expect{op: op{Kind: "tcp", Addr: ap(mapped(lo4), b4.Port())}, errno: "EPERM"},
		expect{op: op{Kind: "tcp", Addr: ap(mapped(lo4b), c4.Port())}, errno: "EPERM"},
		// UDP sendto, over IPv4, IPv6 and v4-mapped.
		expect{op: op{Kind: "udp", Addr: u4.addr.String(), Data: "u"}, reply: "ok:u", from: u4.addr.String()},
		expect{op: op{Kind: "udp", Addr: v4.addr.String(), Data: "v"}, errno: "EPERM"},
		expect{op: op{Kind: "udp", Addr: u6.addr.String(), Data: "u6"}, reply: "ok:u6"},
		expect{op: op{Kind: "udp", Addr: v6.addr.String(), Data: "v6"}, errno: "EPERM"},
		expect{op: op{Kind: "udp", Addr: ap(mapped(lo4), u4.addr.Port()), Data: "um"}, reply: "ok:um"},
		expect{op: op{Kind: "udp", Addr: ap(mapped(lo4), v4.addr.Port()), Data: "vm"}, errno: "EPERM"},
		// UDP connect; then sendto another address on the connected socket.
		expect{op: op{Kind: "udp-connect", Addr: v4.addr.String(), Data: "vc"}, errno: "EPERM"},
		expect{op: op{Kind: "udp-connect", Addr: u4.addr.String(), Data: "uc", Via: v4.addr.String()}, errno: "EPERM", reply: "ok:uc"},
		expect{op: op{Kind: "udp-connect", Addr: ap(mapped(lo4), v4.addr.Port()), Data: "vcm"}, errno: "EPERM"},
		// TCP Fast Open: sendto(MSG_FASTOPEN) connects.
		expect{op: op{Kind: "tfo", Addr: a4.String(), Data: "f"}, reply: "ok:f"},
		expect{op: op{Kind: "tfo", Addr: b4.String(), Data: "f"}, errno: "EPERM"},
		expect{op: op{Kind: "tfo", Addr: b6.String(), Data: "f"}, errno: "EPERM"},
		expect{op: op{Kind: "tfo", Addr: ap(mapped(lo4), b4.Port()), Data: "f"}, errno: "EPERM"},
		// Raw sockets, and options that route a packet elsewhere than its
		// policed destination: the backstop drops them.
		expect{op: op{Kind: "raw-icmp", Addr: ap(lo4, 0)}, errno: "EPERM"},
		expect{op: op{Kind: "raw-icmp", Addr: ap(lo6, 0)}, errno: "EPERM"},
		expect{op: op{Kind: "lsrr", Addr: u4.addr.String(), Via: lo4b.String(), Data: "sr"}, errno: "EPERM"},
		expect{op: op{Kind: "rthdr", Addr: u6.addr.String(), Via: lo6.String(), Data: "rh"}, errno: "EPERM"},
		// Large transfers pass the backstop (GSO, on loopback).
		expect{op: op{Kind: "bulk", Addr: a4.String()}, reply: "ok:bulk 8388608"},
		expect{op: op{Kind: "bulk", Addr: a6.String()}, reply: "ok:bulk 8388608"},
	)
	if got := v4.got.Load() + v6.got.Load(); got != 0 {
		t.Errorf("denied UDP servers received %d datagrams", got)
	}

	// MPTCP, where the kernel has it: its subflows are TCP sockets.
	res := child(t, cg, false, op{Kind: "mptcp", Addr: a4.String(), Data: "mp"}, op{Kind: "mptcp", Addr: b4.String()})
	if res[0].Step == "socket" {
		t.Logf("no MPTCP here (%s): not tested", res[0].Errno)
	} else if res[0].Errno != "" || res[0].Reply != "ok:mp" || res[1].Errno != "EPERM" {
		t.Errorf("MPTCP: allowed %+v, denied %+v", res[0], res[1])
	}
}

// TestPrograms_Contained: the policy follows the sandbox's sockets into a
// sub-cgroup and into a new network namespace, where the namespace's own
// loopback is allowed and the rest is policed as in the host's.
func TestPrograms_Contained(t *testing.T) {
	needBPF(t)
	cg := newCgroup(t, "")
	sub := newCgroup(t, cg)
	a4, b4 := tcpServer(t, "127.0.0.1:0"), tcpServer(t, "127.0.0.1:0")
	load(t, Config{Mode: ModePolicy}, cg,
		Rule{Prefix: prefix(lo4), Ports: []PortRange{Port(a4.Port())}},
		Rule{Prefix: netip.MustParsePrefix("10.98.0.0/24"), Ports: []PortRange{{80, 90}}},
	)

	t.Run("SubCgroup", func(t *testing.T) {
		run(t, sub, false,
			expect{op: op{Kind: "tcp", Addr: a4.String(), Data: "s"}, reply: "ok:s"},
			expect{op: op{Kind: "tcp", Addr: b4.String()}, errno: "EPERM"},
			expect{op: op{Kind: "raw-icmp", Addr: ap(lo4, 0)}, errno: "EPERM"},
		)
	})
	// A namespace without routes: nothing can leave it, and an address
	// without a route tells a denial (EPERM, before routing) from an
	// allowed destination (ENETUNREACH, from routing).
	t.Run("NewNetns", func(t *testing.T) {
		for _, c := range []string{cg, sub} {
			run(t, c, true,
				expect{op: op{Kind: "lo-up"}},
				expect{op: op{Kind: "listen-connect", Addr: "127.0.0.1:0"}},
				expect{op: op{Kind: "listen-connect", Addr: "127.0.0.9:0"}},
				expect{op: op{Kind: "listen-connect", Addr: "[::1]:0"}},
				expect{op: op{Kind: "raw-icmp", Addr: ap(lo4, 0)}},
				expect{op: op{Kind: "tcp", Addr: "10.99.0.1:80"}, errno: "EPERM"},
				expect{op: op{Kind: "tcp", Addr: "10.98.0.1:85"}, errno: "ENETUNREACH"},
				expect{op: op{Kind: "tcp", Addr: "[::ffff:10.99.0.1]:80"}, errno: "EPERM"},
				expect{op: op{Kind: "tcp", Addr: "[::ffff:10.98.0.1]:85"}, errno: "ENETUNREACH"},
				expect{op: op{Kind: "tcp", Addr: "[2001:db8::1]:80"}, errno: "EPERM"},
				expect{op: op{Kind: "udp", Addr: "10.99.0.1:80", Data: "x"}, errno: "EPERM"},
				expect{op: op{Kind: "udp", Addr: "10.98.0.1:80", Data: "x"}, errno: "ENETUNREACH"},
				expect{op: op{Kind: "tfo", Addr: "10.99.0.1:80", Data: "x"}, errno: "EPERM"},
			)
		}
	})
	// A process that runs in the cgroup and then unshares its network
	// namespace (as a sandbox with CAP_SYS_ADMIN in its user namespace
	// could): the programs still decide its new sockets; the host's
	// loopback servers are out of reach (another namespace's loopback).
	t.Run("UnshareNetns", func(t *testing.T) {
		for _, c := range []string{cg, sub} {
			run(t, c, false,
				expect{op: op{Kind: "unshare-netns"}},
				expect{op: op{Kind: "lo-up"}},
				expect{op: op{Kind: "listen-connect", Addr: "127.0.0.1:0"}},
				expect{op: op{Kind: "tcp", Addr: a4.String()}, errno: "ECONNREFUSED"},
				expect{op: op{Kind: "tcp", Addr: "10.99.0.1:80"}, errno: "EPERM"},
				expect{op: op{Kind: "tcp", Addr: "10.98.0.1:85"}, errno: "ENETUNREACH"},
				expect{op: op{Kind: "tcp", Addr: "[::ffff:10.99.0.1]:80"}, errno: "EPERM"},
				expect{op: op{Kind: "tcp", Addr: "[2001:db8::1]:80"}, errno: "EPERM"},
				expect{op: op{Kind: "udp", Addr: "10.99.0.1:80", Data: "x"}, errno: "EPERM"},
				expect{op: op{Kind: "tfo", Addr: "10.99.0.1:80", Data: "x"}, errno: "EPERM"},
			)
		}
	})
}

// TestPrograms_Modes: deny-all denies even what rules allow; the host's
// loopback opens with AllowHostLoopback only; unrestricted lets all out.
func TestPrograms_Modes(t *testing.T) {
	needBPF(t)
	a4 := tcpServer(t, "127.0.0.1:0")
	a6 := tcpServer(t, "[::1]:0")
	t.Run("DenyAll", func(t *testing.T) {
		cg := newCgroup(t, "")
		load(t, Config{}, cg, Rule{Prefix: netip.MustParsePrefix("0.0.0.0/0")}, Rule{Prefix: netip.MustParsePrefix("::/0")})
		run(t, cg, false,
			expect{op: op{Kind: "tcp", Addr: a4.String()}, errno: "EPERM"},
			expect{op: op{Kind: "tcp", Addr: a6.String()}, errno: "EPERM"},
			expect{op: op{Kind: "udp", Addr: a4.String()}, errno: "EPERM"},
		)
		run(t, cg, true,
			expect{op: op{Kind: "lo-up"}},
			expect{op: op{Kind: "listen-connect", Addr: "127.0.0.1:0"}},
			expect{op: op{Kind: "tcp", Addr: "10.98.0.1:85"}, errno: "EPERM"},
		)
	})
	t.Run("HostLoopback", func(t *testing.T) {
		cg := newCgroup(t, "")
		load(t, Config{AllowHostLoopback: true}, cg)
		run(t, cg, false,
			expect{op: op{Kind: "tcp", Addr: a4.String(), Data: "h"}, reply: "ok:h"},
			expect{op: op{Kind: "tcp", Addr: a6.String(), Data: "h6"}, reply: "ok:h6"},
			expect{op: op{Kind: "tcp", Addr: ap(mapped(lo4), a4.Port()), Data: "hm"}, reply: "ok:hm"},
			expect{op: op{Kind: "tcp", Addr: ap(netip.IPv4Unspecified(), a4.Port()), Data: "h0"}, reply: "ok:h0"},
			expect{op: op{Kind: "raw-icmp", Addr: ap(lo4, 0)}},
		)
		run(t, cg, true,
			expect{op: op{Kind: "lo-up"}},
			expect{op: op{Kind: "tcp", Addr: "10.98.0.1:85"}, errno: "EPERM"},
		)
	})
	t.Run("Unrestricted", func(t *testing.T) {
		cg := newCgroup(t, "")
		p := load(t, Config{Mode: ModeUnrestricted}, cg)
		run(t, cg, false,
			expect{op: op{Kind: "tcp", Addr: a4.String(), Data: "u"}, reply: "ok:u"},
			expect{op: op{Kind: "raw-icmp", Addr: ap(lo4, 0)}},
		)
		run(t, cg, true,
			expect{op: op{Kind: "lo-up"}},
			expect{op: op{Kind: "tcp", Addr: "10.98.0.1:85"}, errno: "ENETUNREACH"},
		)
		ds, err := p.Destinations()
		if err != nil {
			t.Fatal(err)
		}
		if !hasDestination(ds, a4, 6, VerdictAllowed, 1) {
			t.Errorf("destinations %v lack %v allowed once", ds, a4)
		}
	})
}

func hasDestination(ds []Destination, dst netip.AddrPort, proto IPProto, v Verdict, count uint64) bool {
	for _, d := range ds {
		if d.Dst == dst && d.Protocol == proto && d.Verdict == v && d.Count == count {
			return true
		}
	}
	return false
}

// TestPrograms_DNSRedirect: every TCP and UDP query to port 53 lands at
// the forwarder, and the client sees the answer come from the server it
// asked (recvmsg, getpeername).
func TestPrograms_DNSRedirect(t *testing.T) {
	needBPF(t)
	t.Run("HostForwarder", func(t *testing.T) {
		cg := newCgroup(t, "")
		fwd4, fwd6 := dnsForwarder(t, "127.0.0.1"), dnsForwarder(t, "::1")
		load(t, Config{Mode: ModePolicy, DNS: fwd4.addr, DNS6: fwd6.addr}, cg)
		run(t, cg, false,
			expect{op: op{Kind: "udp", Addr: "127.0.0.53:53", Data: "q1"}, reply: "ok:q1", from: "127.0.0.53:53"},
			expect{op: op{Kind: "udp", Addr: "[::ffff:127.0.0.53]:53", Data: "q2"}, reply: "ok:q2", from: "[::ffff:127.0.0.53]:53"},
			expect{op: op{Kind: "udp", Addr: "[::1]:53", Data: "q3"}, reply: "ok:q3", from: "[::1]:53"},
			expect{op: op{Kind: "udp-connect", Addr: "127.0.0.53:53", Data: "q4"}, reply: "ok:q4", from: "127.0.0.53:53"},
			expect{op: op{Kind: "udp-connect", Addr: "[::1]:53", Data: "q5"}, reply: "ok:q5", from: "[::1]:53"},
			expect{op: op{Kind: "tcp", Addr: "127.0.0.53:53", Data: "q6"}, reply: "ok:q6", from: "127.0.0.53:53"},
			expect{op: op{Kind: "tcp", Addr: "[::ffff:127.0.0.53]:53", Data: "q7"}, reply: "ok:q7", from: "[::ffff:127.0.0.53]:53"},
			expect{op: op{Kind: "tcp", Addr: "[::1]:53", Data: "q8"}, reply: "ok:q8", from: "[::1]:53"},
			expect{op: op{Kind: "tfo", Addr: "127.0.0.53:53", Data: "q9"}, reply: "ok:q9"},
			// The forwarder itself is reachable; port 53 only is redirected.
			expect{op: op{Kind: "udp", Addr: fwd4.addr.String(), Data: "q10"}, reply: "ok:q10", from: fwd4.addr.String()},
			expect{op: op{Kind: "tcp", Addr: "127.0.0.53:80"}, errno: "EPERM"},
		)
		if got, want := fwd4.got.Load(), int64(4); got != want {
			t.Errorf("IPv4 forwarder got %d UDP queries, want %d", got, want)
		}
		if got, want := fwd6.got.Load(), int64(2); got != want {
			t.Errorf("IPv6 forwarder got %d UDP queries, want %d", got, want)
		}
	})
	// In a network namespace without routes, an answer can only come from
	// the forwarder: the queries to 10.53.0.1 and fd00::53 went there.
	t.Run("Netns", func(t *testing.T) {
		cg := newCgroup(t, "")
		load(t, Config{Mode: ModePolicy, DNS: netip.MustParseAddrPort("127.0.0.1:5353"), DNS6: netip.MustParseAddrPort("[::1]:5353")}, cg)
		run(t, cg, true,
			expect{op: op{Kind: "lo-up"}},
			expect{op: op{Kind: "echo-server", Addr: "127.0.0.1:5353"}},
			expect{op: op{Kind: "echo-server", Addr: "[::1]:5353"}},
			expect{op: op{Kind: "udp", Addr: "10.53.0.1:53", Data: "n1"}, reply: "ok:n1", from: "10.53.0.1:53"},
			expect{op: op{Kind: "udp", Addr: "[::ffff:10.53.0.1]:53", Data: "n2"}, reply: "ok:n2", from: "[::ffff:10.53.0.1]:53"},
			expect{op: op{Kind: "udp", Addr: "[fd00::53]:53", Data: "n3"}, reply: "ok:n3", from: "[fd00::53]:53"},
			expect{op: op{Kind: "udp-connect", Addr: "10.53.0.1:53", Data: "n4"}, reply: "ok:n4", from: "10.53.0.1:53"},
			expect{op: op{Kind: "tcp", Addr: "10.53.0.1:53", Data: "n5"}, reply: "ok:n5", from: "10.53.0.1:53"},
			expect{op: op{Kind: "tcp", Addr: "[fd00::53]:53", Data: "n6"}, reply: "ok:n6", from: "[fd00::53]:53"},
			expect{op: op{Kind: "tcp", Addr: "10.53.0.1:80"}, errno: "EPERM"},
		)
	})
	// Without an IPv6 forwarder, IPv6 queries are policed like the rest;
	// v4-mapped ones still go to the IPv4 forwarder.
	t.Run("NoIPv6Forwarder", func(t *testing.T) {
		cg := newCgroup(t, "")
		load(t, Config{Mode: ModePolicy, DNS: netip.MustParseAddrPort("127.0.0.1:5353")}, cg)
		run(t, cg, true,
			expect{op: op{Kind: "lo-up"}},
			expect{op: op{Kind: "echo-server", Addr: "127.0.0.1:5353"}},
			expect{op: op{Kind: "udp", Addr: "[fd00::53]:53", Data: "m1"}, errno: "EPERM"},
			expect{op: op{Kind: "tcp", Addr: "[fd00::53]:53", Data: "m2"}, errno: "EPERM"},
			expect{op: op{Kind: "udp", Addr: "[::ffff:10.53.0.1]:53", Data: "m3"}, reply: "ok:m3", from: "[::ffff:10.53.0.1]:53"},
			expect{op: op{Kind: "udp", Addr: "10.53.0.1:53", Data: "m4"}, reply: "ok:m4", from: "10.53.0.1:53"},
		)
	})
}

// TestPrograms_Audit: the counters hold every decision per destination;
// the ring buffer holds every denial and the first decision for each
// destination, with the caller's PID and cgroup.
func TestPrograms_Audit(t *testing.T) {
	needBPF(t)
	cg := newCgroup(t, "")
	a4, b4 := tcpServer(t, "127.0.0.1:0"), tcpServer(t, "127.0.0.1:0")
	u4 := newUDPServer(t, "127.0.0.1:0")
	p := load(t, Config{Mode: ModePolicy}, cg,
		Rule{Prefix: prefix(lo4), Ports: []PortRange{Port(a4.Port())}, Protocols: TCP},
		Rule{Prefix: prefix(lo4), Ports: []PortRange{Port(u4.addr.Port())}, Protocols: UDP},
	)
	er, err := p.Events()
	if err != nil {
		t.Fatal(err)
	}
	defer er.Close()
	if _, err := p.Events(); err == nil {
		t.Error("a second event reader opened")
	}

	mappedB4 := netip.AddrPortFrom(mapped(lo4), b4.Port())
	res := run(t, cg, false,
		expect{op: op{Kind: "tcp", Addr: a4.String(), Data: "1"}},
		expect{op: op{Kind: "tcp", Addr: a4.String(), Data: "2"}},
		expect{op: op{Kind: "tcp", Addr: a4.String(), Data: "3"}},
		expect{op: op{Kind: "tcp", Addr: b4.String()}, errno: "EPERM"},
		expect{op: op{Kind: "tfo", Addr: b4.String(), Data: "f"}, errno: "EPERM"}, // TCP Fast Open goes through connect4
		expect{op: op{Kind: "tcp", Addr: mappedB4.String()}, errno: "EPERM"},
		expect{op: op{Kind: "udp", Addr: u4.addr.String(), Data: "u"}},
		expect{op: op{Kind: "udp", Addr: ap(mapped(lo4), u4.addr.Port()), Data: "u"}},
		// connect() is decided; send() on the connected socket is not again.
		expect{op: op{Kind: "udp-connect", Addr: u4.addr.String(), Data: "c"}},
		expect{op: op{Kind: "raw-icmp", Addr: ap(lo4, 0)}, errno: "EPERM"},
	)
	pid := uint32(res[0].PID)
	var st unix.Stat_t
	if err := unix.Stat(cg, &st); err != nil {
		t.Fatal(err)
	}
	cgroupID := st.Ino // a cgroup2 ID is its directory's inode number

	icmp := netip.AddrPortFrom(lo4, 0)
	want := []Destination{
		{Dst: a4, Protocol: 6, Verdict: VerdictAllowed, Count: 3},
		{Dst: b4, Protocol: 6, Verdict: VerdictDenied, Count: 2},
		{Dst: mappedB4, Protocol: 6, Verdict: VerdictDenied, Count: 1},
		// sendto, the v4-mapped sendto (which the kernel turns into an
		// IPv4 one, through sendmsg4), and the UDP connect.
		{Dst: u4.addr, Protocol: 17, Verdict: VerdictAllowed, Count: 3},
		{Dst: icmp, Protocol: 1, Verdict: VerdictDenied, Count: 1},
	}
	ds, err := p.Destinations()
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, d := range ds {
		total += d.Count
		if d.First.IsZero() || d.Last.Before(d.First) {
			t.Errorf("%v: first %v last %v", d.Dst, d.First, d.Last)
		}
	}
	var wantTotal uint64
	for _, w := range want {
		wantTotal += w.Count
		if !hasDestination(ds, w.Dst, w.Protocol, w.Verdict, w.Count) {
			t.Errorf("destinations lack %v %v %v x%d", w.Dst, w.Protocol, w.Verdict, w.Count)
		}
	}
	if total != wantTotal {
		t.Errorf("destinations %v: %d decisions, want %d", ds, total, wantTotal)
	}

	type evKey struct {
		hook    Hook
		verdict Verdict
		proto   IPProto
		dst     netip.AddrPort
	}
	got := map[evKey]int{}
	er.SetDeadline(time.Now()) // everything is in the buffer already
	for {
		ev, err := er.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.PID != pid || ev.TID == 0 || ev.CgroupID != cgroupID || ev.Time.IsZero() {
			t.Errorf("event %+v: want pid %d, cgroup %d", ev, pid, cgroupID)
		}
		got[evKey{ev.Hook, ev.Verdict, ev.Protocol, ev.Dst}]++
	}
	wantEv := map[evKey]int{
		{HookConnect4, VerdictAllowed, 6, a4}:       1, // the first only
		{HookConnect4, VerdictDenied, 6, b4}:        2, // every denial (connect, TCP Fast Open)
		{HookConnect6, VerdictDenied, 6, mappedB4}:  1,
		{HookSendmsg4, VerdictAllowed, 17, u4.addr}: 1,
		{HookEgress, VerdictDenied, 1, icmp}:        1,
	}
	if !maps.Equal(got, wantEv) {
		t.Errorf("events %v, want %v", got, wantEv)
	}
	if s, err := p.Stats(); err != nil || s != (Stats{}) {
		t.Errorf("stats %+v, %v", s, err)
	}
}

// TestPrograms_AllowAddr: dynamic addresses allow their ports until they
// expire, then no more.
func TestPrograms_AllowAddr(t *testing.T) {
	needBPF(t)
	cg := newCgroup(t, "")
	c4 := tcpServer(t, "127.0.0.2:0")
	a6 := tcpServer(t, "[::1]:0")
	p := load(t, Config{Mode: ModePolicy}, cg)

	// Expired before the child connects: a nanosecond after it was added.
	if err := p.AllowAddr(lo4b, []PortRange{Port(c4.Port())}, TCP, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	run(t, cg, false, expect{op: op{Kind: "tcp", Addr: c4.String()}, errno: "EPERM"})

	if err := p.AllowAddr(lo4b, []PortRange{Port(c4.Port())}, TCP, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := p.AllowAddr(lo6, []PortRange{Port(a6.Port())}, 0, time.Hour); err != nil {
		t.Fatal(err)
	}
	run(t, cg, false,
		expect{op: op{Kind: "tcp", Addr: c4.String(), Data: "d"}, reply: "ok:d"},
		expect{op: op{Kind: "tcp", Addr: ap(mapped(lo4b), c4.Port()), Data: "dm"}, reply: "ok:dm"},
		expect{op: op{Kind: "udp", Addr: c4.String(), Data: "x"}, errno: "EPERM"}, // TCP only
		expect{op: op{Kind: "tcp", Addr: ap(lo4b, c4.Port()+1)}, errno: "EPERM"},
		expect{op: op{Kind: "tcp", Addr: a6.String(), Data: "d6"}, reply: "ok:d6"},
	)

	// Expired entries go from the map with PruneAddrs.
	lo5 := netip.MustParseAddr("127.0.0.5")
	if err := p.AllowAddr(lo5, nil, 0, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	if err := p.PruneAddrs(); err != nil {
		t.Fatal(err)
	}
	if v, err := p.m(mapAddrs).LookupBytes(addrKey(lo5)); err != nil || v != nil {
		t.Errorf("expired %v still in the map after PruneAddrs", lo5)
	}
	if v, _ := p.m(mapAddrs).LookupBytes(addrKey(lo4b)); v == nil {
		t.Errorf("%v gone from the map after PruneAddrs", lo4b)
	}
	if got := len(p.addrs[lo4b.As16()]); got != 1 {
		t.Errorf("%v has %d entries, want the two grants merged into 1", lo4b, got)
	}

	var ports []PortRange
	for i := range MaxPortRanges + 1 {
		ports = append(ports, Port(uint16(1000+2*i)))
	}
	if err := p.AllowAddr(lo5, ports, TCP, time.Hour); !errors.Is(err, ErrFull) {
		t.Errorf("AllowAddr with %d ranges: %v, want ErrFull", len(ports), err)
	}
	if err := p.AllowAddr(lo5, nil, 0, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("AllowAddr with ttl 0: %v, want ErrInvalid", err)
	}
}

// bpffs mounts a bpffs for the test, unmounted at its end.
func bpffs(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bpffs")
	if err := MountBPFFS(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount bpffs: %v", err)
		}
	})
	if err := MountBPFFS(dir); err != nil {
		t.Errorf("MountBPFFS on a bpffs: %v", err)
	}
	return dir
}

// TestPrograms_SupervisorCrash: once pinned, the programs outlive the
// process that loaded them: the sandbox stays policed until the pins go.
func TestPrograms_SupervisorCrash(t *testing.T) {
	needBPF(t)
	pins := filepath.Join(bpffs(t), "sandbox")
	t.Cleanup(func() {
		if err := RemovePinned(pins); err != nil {
			t.Error(err)
		}
	})
	cg := newCgroup(t, "")
	a4, b4 := tcpServer(t, "127.0.0.1:0"), tcpServer(t, "127.0.0.1:0")

	spec, _ := json.Marshal(loaderSpec{Cgroup: cg, PinDir: pins, Allow: []string{a4.String()}})
	out, err := runInCgroup(t, mustOwnCgroup(t), false, loaderEnv+"="+string(spec))
	if err != nil || strings.TrimSpace(string(out)) != "pinned" {
		t.Fatalf("loader: %q, %v", out, err)
	}
	// The loader has exited without cleaning up.
	if n := attachedPrograms(t, cg); n != len(programSpecs) {
		t.Fatalf("%d programs attached after the loader exited, want %d", n, len(programSpecs))
	}
	run(t, cg, false,
		expect{op: op{Kind: "tcp", Addr: a4.String(), Data: "p"}, reply: "ok:p"},
		expect{op: op{Kind: "tcp", Addr: b4.String()}, errno: "EPERM"},
		expect{op: op{Kind: "raw-icmp", Addr: ap(lo4, 0)}, errno: "EPERM"},
	)

	// A new supervisor cleans up after the old one.
	if err := RemovePinned(pins); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after RemovePinned: %v", err)
	}
	if n := attachedPrograms(t, cg); n != 0 {
		t.Errorf("%d programs attached after RemovePinned", n)
	}
	run(t, cg, false, expect{op: op{Kind: "tcp", Addr: b4.String(), Data: "free"}, reply: "ok:free"})
}

func mustOwnCgroup(t *testing.T) string {
	t.Helper()
	cg, err := ownCgroup2()
	if err != nil {
		t.Fatal(err)
	}
	return cg
}

// TestPrograms_PinClose: Pin puts the links and maps in the directory;
// Close removes them, detaches, and refuses further use.
func TestPrograms_PinClose(t *testing.T) {
	needBPF(t)
	pins := filepath.Join(bpffs(t), "sandbox")
	cg := newCgroup(t, "")
	p, err := Load(Config{Mode: ModePolicy})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Pin(pins); err == nil {
		t.Error("Pin before Attach succeeded")
	}
	if err := p.Attach(t.TempDir()); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Attach to a directory that is not a cgroup2 one: %v, want ErrNotSupported", err)
	}
	if err := p.Attach(cg); err != nil {
		t.Fatal(err)
	}
	if err := p.Attach(cg); err == nil {
		t.Error("second Attach succeeded")
	}
	if err := p.Pin(t.TempDir()); err == nil {
		t.Error("Pin outside a bpffs succeeded")
	}
	if err := p.Pin(pins); err != nil {
		t.Fatal(err)
	}
	for _, n := range pinNames() {
		if _, err := os.Stat(filepath.Join(pins, n)); err != nil {
			t.Errorf("pin %s: %v", n, err)
		}
	}
	if n := attachedPrograms(t, cg); n != len(programSpecs) {
		t.Errorf("%d programs attached, want %d", n, len(programSpecs))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after Close: %v", err)
	}
	if n := attachedPrograms(t, cg); n != 0 {
		t.Errorf("%d programs attached after Close", n)
	}
	if err := p.Allow(Rule{Prefix: prefix(lo4)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Allow after Close: %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestPrograms_AllowLimits: a prefix holds MaxPortRanges ranges with those
// of the shorter prefixes that contain it; more is ErrFull, and the rule
// that failed is not installed.
func TestPrograms_AllowLimits(t *testing.T) {
	needBPF(t)
	p, err := Load(Config{Mode: ModePolicy, MaxRules: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var ports []PortRange
	for i := range MaxPortRanges {
		ports = append(ports, Port(uint16(100+2*i)))
	}
	if err := p.Allow(Rule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: ports}); err != nil {
		t.Fatal(err)
	}
	if err := p.Allow(Rule{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Ports: []PortRange{Port(7)}}); !errors.Is(err, ErrFull) {
		t.Errorf("a 17th range through a containing prefix: %v, want ErrFull", err)
	}
	if n := trieSize(t, p.m(mapRules4)); n != 1 {
		t.Errorf("the refused rule is installed: %d prefixes in the trie", n)
	}
	// Ranges that merge still fit.
	if err := p.Allow(Rule{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Ports: []PortRange{{100, 130}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Allow(Rule{Prefix: netip.MustParsePrefix("192.168.0.0/16")}); !errors.Is(err, ErrFull) {
		t.Errorf("a third prefix in a map of 2: %v, want ErrFull", err)
	}
	if n := trieSize(t, p.m(mapRules4)); n != 2 {
		t.Errorf("%d prefixes in the trie, want 2", n)
	}
	if err := p.Allow(Rule{Prefix: netip.MustParsePrefix("::/0")}); err != nil {
		t.Errorf("IPv6 has its own map: %v", err)
	}
	if err := p.Allow(Rule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []PortRange{{9, 8}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("inverted range: %v, want ErrInvalid", err)
	}
}

func trieSize(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	n := 0
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
