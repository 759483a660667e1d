package netpolicy

import (
	"net/netip"
	"strconv"
	"time"
)

// Config is what Start needs for one sandbox run. The zero value is
// ModeNone, which needs nothing.
type Config struct {
	// Policy is the egress policy (validated by Start).
	Policy Policy
	// CgroupPath is the sandbox's cgroup2 directory, which must exist and
	// hold no process yet. Required for ModePolicy and ModeUnrestricted.
	CgroupPath string
	// BPFFS is the bpffs directory the programs are pinned under (each
	// session in its own subdirectory, PinName), so that they stay attached
	// if the supervisor dies. Default: /sys/fs/bpf/cairn when /sys/fs/bpf
	// is a bpffs, else /run/cairn/bpffs, where Start mounts a bpffs (left
	// mounted for later runs).
	BPFFS string
	// PinName is the session's subdirectory of BPFFS; default
	// "cgroup-<inode of CgroupPath>", unique while the cgroup exists.
	PinName string
	// Upstreams is the DNS resolvers the forwarder asks (host:port);
	// default the nameservers of ResolvConf.
	Upstreams []string
	// ResolvConf is where default upstreams come from; default
	// /etc/resolv.conf.
	ResolvConf string
	// MinTTL is the floor of how long a resolved address stays allowed;
	// default 30 s (DefaultMinTTL).
	MinTTL time.Duration
	// Logf receives diagnostics; default none.
	Logf func(format string, args ...any)
}

// Validate reports whether Start can use the config.
func (c Config) Validate() error {
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if c.Policy.Mode != ModeNone && c.CgroupPath == "" {
		return ruleErr("netpolicy config", "no cgroup for mode "+c.Policy.Mode.String(), "set CgroupPath to the sandbox's cgroup2 directory")
	}
	for _, u := range c.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			return ruleErr("upstream "+strconv.Quote(u), "not an address and port", "write 127.0.0.53:53 or [2001:db8::1]:53")
		}
	}
	if c.MinTTL < 0 {
		return ruleErr("netpolicy config", "negative MinTTL", "")
	}
	return nil
}

// Audit is the egress log of a run, for the turn's snapshot record.
type Audit struct {
	Mode Mode `json:"mode"`
	// Audited says whether programs watched the run: false for ModeNone
	// (no network), and for ModeUnrestricted where BPF is unavailable.
	Audited bool `json:"audited"`
	// Destinations is every destination the sandbox tried, per (address,
	// port, protocol, verdict), sorted by address, port, protocol, verdict.
	Destinations []Destination `json:"destinations,omitempty"`
	// DNS is the forwarder's query log (ModePolicy).
	DNS []DNSQuery `json:"dns,omitempty"`
	// Denials is the first denied attempts with the process that made
	// them, up to 1000 (DenialsDropped counts the rest).
	Denials        []Denial `json:"denials,omitempty"`
	DenialsDropped uint64   `json:"denialsDropped,omitempty"`
	// Losses: DNS queries not logged, decisions not counted (counter map
	// full), events lost (ring buffer full). Non-zero means the figures
	// above are short.
	DNSDropped          uint64 `json:"dnsDropped,omitempty"`
	DestinationsDropped uint64 `json:"destinationsDropped,omitempty"`
	EventsLost          uint64 `json:"eventsLost,omitempty"`
}

// Destination is the count of one (address, port, protocol, verdict).
type Destination struct {
	// Addr is the destination; IPv4-mapped addresses are shown as IPv4.
	// For Verdict "redirected" it is the DNS server the sandbox asked
	// (the query went to the forwarder).
	Addr netip.Addr `json:"addr"`
	// Port is 0 for packets the backstop dropped (raw sockets, ICMP).
	Port     uint16 `json:"port"`
	Protocol string `json:"protocol"` // tcp, udp, icmp...
	Verdict  string `json:"verdict"`  // allowed, denied, redirected
	Count    uint64 `json:"count"`
	// Names is the names the forwarder answered this address for, when
	// it did.
	Names []string  `json:"names,omitempty"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// Denial is one denied attempt.
type Denial struct {
	Time     time.Time      `json:"time"`
	PID      uint32         `json:"pid"` // in the initial PID namespace
	Dst      netip.AddrPort `json:"dst"`
	Protocol string         `json:"protocol"`
	Hook     string         `json:"hook"` // connect4, sendmsg6, egress...
}

const maxDenials = 1000
