package cgroupbpf

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"
)

// Mode says what the programs let through besides the DNS redirect.
type Mode uint32

const (
	// ModeDenyAll lets nothing out but the sandbox's own loopback (and the
	// host's, with Config.AllowHostLoopback). The zero value.
	ModeDenyAll Mode = iota
	// ModePolicy lets out what the rules (Allow) and the dynamic addresses
	// (AllowAddr) allow, and the DNS forwarder.
	ModePolicy
	// ModeUnrestricted lets everything out. Decisions are still counted
	// (Destinations) and the first one per destination is reported (Events).
	ModeUnrestricted
)

func (m Mode) String() string {
	switch m {
	case ModeDenyAll:
		return "deny-all"
	case ModePolicy:
		return "policy"
	case ModeUnrestricted:
		return "unrestricted"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Proto is a set of transport protocols a rule allows.
type Proto uint8

const (
	TCP Proto = 1 << iota // TCP, and MPTCP, whose subflows are TCP
	UDP                   // UDP
	// AnyProto is TCP and UDP. No other protocol is ever allowed in
	// ModePolicy: the egress backstop drops everything else.
	AnyProto = TCP | UDP
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case AnyProto, 0:
		return "tcp+udp"
	}
	return "proto(" + strconv.Itoa(int(p)) + ")"
}

// PortRange is an inclusive range of destination ports.
type PortRange struct {
	First, Last uint16
}

// AllPorts is every port.
var AllPorts = PortRange{0, 65535}

// Port is the range holding one port.
func Port(p uint16) PortRange { return PortRange{p, p} }

func (r PortRange) String() string {
	switch {
	case r == AllPorts:
		return "*"
	case r.First == r.Last:
		return strconv.Itoa(int(r.First))
	}
	return strconv.Itoa(int(r.First)) + "-" + strconv.Itoa(int(r.Last))
}

// MaxPortRanges is how many (port range, protocols) pairs one prefix or one
// dynamic address can hold after merging: the rules of a prefix include
// those of every shorter prefix that contains it.
const MaxPortRanges = 16

// Rule allows connections to a network.
type Rule struct {
	// Prefix is the destination network: 10.0.0.0/8, 1.2.3.4/32,
	// 2001:db8::/32. IPv4-mapped IPv6 prefixes (::ffff:10.0.0.0/104) are the
	// IPv4 prefix they map. Host bits are ignored (the prefix is masked).
	// IPv4 destinations, v4-mapped ones on AF_INET6 sockets included, meet
	// IPv4 prefixes only: ::/0 allows no IPv4 address.
	Prefix netip.Prefix
	// Ports is the destination ports allowed; empty means all.
	Ports []PortRange
	// Protocols is TCP, UDP or both; zero means both.
	Protocols Proto
}

// Validate reports whether the rule can be installed.
func (r Rule) Validate() error {
	if !r.Prefix.IsValid() {
		return fmt.Errorf("%w: rule prefix %v is not a valid IPv4 or IPv6 prefix", ErrInvalid, r.Prefix)
	}
	if r.Prefix.Addr().Is4In6() && r.Prefix.Bits() < 96 {
		return fmt.Errorf("%w: rule prefix %v is wider than the IPv4-mapped range ::ffff:0:0/96", ErrInvalid, r.Prefix)
	}
	return validatePorts(r.Ports, r.Protocols)
}

func validatePorts(ports []PortRange, protos Proto) error {
	if protos&^AnyProto != 0 {
		return fmt.Errorf("%w: protocols %#x: only TCP and UDP", ErrInvalid, uint8(protos))
	}
	for _, pr := range ports {
		if pr.First > pr.Last {
			return fmt.Errorf("%w: port range %d-%d is inverted", ErrInvalid, pr.First, pr.Last)
		}
	}
	return nil
}

// Config is what Load needs. The zero value loads programs that deny
// everything but the sandbox's own loopback.
type Config struct {
	// Mode is what gets out; default ModeDenyAll.
	Mode Mode
	// DNS is the IPv4 address and port of the DNS forwarder: every TCP or
	// UDP connect or sendmsg to port 53 of any IPv4 address (v4-mapped ones
	// on AF_INET6 sockets too) goes there instead, and answers seem to come
	// from the address the program asked (recvmsg, getpeername). Zero: no
	// redirect, port 53 is policed like any other. Needs ModePolicy or
	// ModeUnrestricted.
	DNS netip.AddrPort
	// DNS6 is the IPv6 forwarder, for port 53 of every native IPv6
	// address. Zero: IPv6 queries are policed like any other destination
	// (they cannot go to DNS: the kernel refuses to rewrite an IPv6
	// sendmsg to a v4-mapped address).
	DNS6 netip.AddrPort
	// AllowHostLoopback lets the sandbox reach the host's loopback
	// (127.0.0.0/8, ::1, and 0.0.0.0 and ::, which connect to it) when it
	// runs in the host's network namespace. Default false: only rules allow
	// it. The loopback of any other network namespace (the sandbox's own) is
	// always allowed. The host's network namespace is the one of the
	// process that calls Load.
	AllowHostLoopback bool
	// MaxRules is how many prefixes each of the IPv4 and IPv6 rule maps
	// holds; default 1024.
	MaxRules int
	// MaxAddrs is how many dynamic addresses (AllowAddr) the map holds;
	// default 16384.
	MaxAddrs int
	// MaxDestinations is how many distinct (destination, protocol,
	// verdict) counters the audit map holds; default 16384. Decisions
	// beyond it are still enforced and reported as events, and counted in
	// Stats.DestinationsDropped.
	MaxDestinations int
	// EventBufferBytes is the size of the event ring buffer; default 256
	// KiB. A power of two and a multiple of the page size.
	EventBufferBytes int
}

// Validate reports whether the config can be loaded.
func (c Config) Validate() error {
	if c.Mode > ModeUnrestricted {
		return fmt.Errorf("%w: unknown mode %d", ErrInvalid, uint32(c.Mode))
	}
	if c.DNS.IsValid() {
		if !c.DNS.Addr().Unmap().Is4() || c.DNS.Port() == 0 {
			return fmt.Errorf("%w: DNS forwarder %v must be an IPv4 address and a port", ErrInvalid, c.DNS)
		}
	}
	if c.DNS6.IsValid() {
		a := c.DNS6.Addr()
		if !a.Is6() || a.Is4In6() || a.Zone() != "" || c.DNS6.Port() == 0 {
			return fmt.Errorf("%w: DNS6 forwarder %v must be an IPv6 address (not v4-mapped, no zone) and a port", ErrInvalid, c.DNS6)
		}
	}
	if (c.DNS.IsValid() || c.DNS6.IsValid()) && c.Mode == ModeDenyAll {
		return fmt.Errorf("%w: a DNS forwarder needs mode policy or unrestricted, not deny-all", ErrInvalid)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxRules", c.MaxRules}, {"MaxAddrs", c.MaxAddrs}, {"MaxDestinations", c.MaxDestinations}, {"EventBufferBytes", c.EventBufferBytes}} {
		if f.v < 0 || f.v > 1<<30 {
			return fmt.Errorf("%w: %s %d out of range", ErrInvalid, f.name, f.v)
		}
	}
	if n := c.EventBufferBytes; n != 0 && (n&(n-1) != 0 || n < 4096) {
		return fmt.Errorf("%w: EventBufferBytes %d must be a power of two of at least 4096", ErrInvalid, n)
	}
	return nil
}

// Verdict is what a program decided.
type Verdict uint8

const (
	VerdictAllowed    Verdict = 1 // let through unchanged
	VerdictDenied     Verdict = 2 // refused: connect/sendmsg got EPERM, or the packet was dropped
	VerdictRedirected Verdict = 3 // a DNS query sent to the forwarder instead
)

func (v Verdict) String() string {
	switch v {
	case VerdictAllowed:
		return "allowed"
	case VerdictDenied:
		return "denied"
	case VerdictRedirected:
		return "redirected"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Hook is the program that decided.
type Hook uint8

const (
	HookConnect4 Hook = 1 + iota // connect() (and TCP Fast Open) on an AF_INET socket
	HookConnect6                 // connect() on an AF_INET6 socket, v4-mapped destinations too
	HookSendmsg4                 // sendto/sendmsg with an address, UDP over IPv4 (AF_INET6 sockets sending to v4-mapped too)
	HookSendmsg6                 // sendto/sendmsg with an address, UDP over IPv6
	HookEgress                   // the packet backstop: not TCP or UDP, IP options, a routing header
)

func (h Hook) String() string {
	switch h {
	case HookConnect4:
		return "connect4"
	case HookConnect6:
		return "connect6"
	case HookSendmsg4:
		return "sendmsg4"
	case HookSendmsg6:
		return "sendmsg6"
	case HookEgress:
		return "egress"
	}
	return "hook(" + strconv.Itoa(int(h)) + ")"
}

// IPProto is an IP protocol number (6 TCP, 17 UDP, 1 ICMP...).
type IPProto uint8

func (p IPProto) String() string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	case 132:
		return "sctp"
	}
	return "ipproto(" + strconv.Itoa(int(p)) + ")"
}

// Event is one decision reported through the ring buffer: every denial, and
// the first decision for each new (destination, protocol, verdict).
type Event struct {
	// Time is when the program ran (wall clock, converted from boot time).
	Time time.Time
	// PID and TID are the calling task's process and thread IDs in the
	// initial PID namespace. For HookEgress they are the task that sent the
	// packet, which for the packets the backstop drops (sendmsg on raw and
	// ICMP sockets) is the sender.
	PID, TID uint32
	// CgroupID is the cgroup2 ID of the calling task (a sub-cgroup of the
	// attached one, or the attached one itself).
	CgroupID uint64
	Hook     Hook
	Verdict  Verdict
	// Protocol is the socket's protocol (the packet's, for HookEgress).
	Protocol IPProto
	// Dst is the destination the program saw. IPv4-mapped addresses on
	// AF_INET6 sockets stay mapped (Unmap them to aggregate); for
	// VerdictRedirected it is the DNS server the sandbox asked for. Ports
	// are zero for HookEgress.
	Dst netip.AddrPort
}

// Destination is the audit counter of one (destination, protocol, verdict).
type Destination struct {
	// Dst is as in Event: v4-mapped on AF_INET6 sockets (a counter of its
	// own), the asked server for VerdictRedirected, port 0 for packets the
	// backstop dropped.
	Dst      netip.AddrPort
	Protocol IPProto
	Verdict  Verdict
	// Count is how many connects, sendmsgs or (for HookEgress) packets.
	Count uint64
	// First and Last are the first and the latest decision.
	First, Last time.Time
}

// Stats are the programs' own counters.
type Stats struct {
	// EventsLost counts events dropped because the ring buffer was full
	// (nobody reading, or reading too slowly).
	EventsLost uint64
	// DestinationsDropped counts decisions not counted in Destinations
	// because the counter map was full.
	DestinationsDropped uint64
}
