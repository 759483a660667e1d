package cgroupbpf

import (
	"encoding/binary"
	"net/netip"
)

// The byte layouts shared by the BPF programs (asm_linux.go) and the Go side.
// Integers are in the host's byte order unless the name says otherwise;
// addresses are always in network order, IPv4 as the last 4 bytes of a
// v4-mapped IPv6 address (::ffff:a.b.c.d) wherever both families share a
// field.

// Config map value (one entry, key 0).
const (
	cfgMode     = 0  // u32 Mode
	cfgFlags    = 4  // u32 cfgFlag*
	cfgDNS4Addr = 8  // [4]byte
	cfgDNS4Port = 12 // u32 in bpf_sock_addr.user_port form; 0: no IPv4 forwarder
	cfgDNS6Addr = 16 // [16]byte
	cfgDNS6Port = 32 // u32 user_port form; 0: no IPv6 forwarder
	cfgNetns    = 40 // u64 cookie of the host's network namespace
	cfgSize     = 48

	cfgFlagHostLoopback = 1
)

// Port set value of the rule tries and of the dynamic address map: an array
// of portEntries; an entry with no protocol bit is unused.
const (
	peFirst   = 0 // u16 first port, host order
	peLast    = 2 // u16 last port
	peProtos  = 4 // u8 Proto bits
	peExpires = 8 // u64 CLOCK_BOOTTIME ns after which it no longer allows; 0 never
	peSize    = 16

	portsSize = MaxPortRanges * peSize
)

// LPM trie keys: u32 prefix length, then the address.
const (
	lpm4Size = 4 + 4
	lpm6Size = 4 + 16
)

// Counter map key and value (audit of destinations).
const (
	ckAddr    = 0  // [16]byte
	ckPort    = 16 // u16 host order
	ckProto   = 18 // u8 IP protocol
	ckVerdict = 19 // u8 Verdict
	ckFamily  = 20 // u8 AF_INET or AF_INET6: how Dst is reported
	ckSize    = 24 // 21..23 zero

	cvCount = 0  // u64
	cvFirst = 8  // u64 boot ns
	cvLast  = 16 // u64 boot ns
	cvSize  = 24
)

// Ring buffer event. Bytes 40..47 repeat the counter key's bytes 16..23,
// with the hook in the first padding byte.
const (
	evTime     = 0  // u64 boot ns
	evCgroup   = 8  // u64
	evPidTgid  = 16 // u64 tgid<<32 | pid
	evAddr     = 24 // [16]byte
	evPort     = 40 // u16
	evProto    = 42 // u8
	evVerdict  = 43 // u8
	evFamily   = 44 // u8
	evHook     = 45 // u8
	eventSize  = 48
	evKeyBytes = ckPort // offset in the counter key of the 8 bytes copied to evPort
)

// Per-socket storage of the original DNS destination.
const (
	osAddr = 0  // [16]byte, IPv4 v4-mapped
	osPort = 16 // u32 user_port form
	osSet  = 20 // u32 1 once set
	osSize = 24
)

// Stats array value (one entry).
const (
	stLost = 0 // u64 events lost
	stFull = 8 // u64 decisions not counted: counter map full
	stSize = 16
)

const (
	afInet  = 2
	afInet6 = 10

	ipprotoTCP   = 6
	ipprotoUDP   = 17
	ipprotoMPTCP = 262
)

const (
	defaultMaxRules         = 1024
	defaultMaxAddrs         = 16384
	defaultMaxDestinations  = 16384
	defaultEventBufferBytes = 256 << 10
)

func (c Config) withDefaults() Config {
	if c.MaxRules == 0 {
		c.MaxRules = defaultMaxRules
	}
	if c.MaxAddrs == 0 {
		c.MaxAddrs = defaultMaxAddrs
	}
	if c.MaxDestinations == 0 {
		c.MaxDestinations = defaultMaxDestinations
	}
	if c.EventBufferBytes == 0 {
		c.EventBufferBytes = defaultEventBufferBytes
	}
	return c
}

// rawPort is p as bpf_sock_addr.user_port holds it: the network-order
// 16-bit port loaded as a host integer.
func rawPort(p uint16) uint32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return uint32(binary.NativeEndian.Uint16(b[:]))
}

// word is the host integer with the bytes b (network order) in memory.
func word(b ...byte) int64 { return int64(binary.NativeEndian.Uint32(b)) }

// mappedWord is bytes 8..11 of a v4-mapped address (00 00 ff ff).
var mappedWord = word(0, 0, 0xff, 0xff)

func encodeConfig(c Config, netnsCookie uint64) []byte {
	b := make([]byte, cfgSize)
	ne := binary.NativeEndian
	ne.PutUint32(b[cfgMode:], uint32(c.Mode))
	var flags uint32
	if c.AllowHostLoopback {
		flags |= cfgFlagHostLoopback
	}
	ne.PutUint32(b[cfgFlags:], flags)
	if c.DNS.IsValid() {
		a := c.DNS.Addr().Unmap().As4()
		copy(b[cfgDNS4Addr:], a[:])
		ne.PutUint32(b[cfgDNS4Port:], rawPort(c.DNS.Port()))
	}
	if c.DNS6.IsValid() {
		a := c.DNS6.Addr().As16()
		copy(b[cfgDNS6Addr:], a[:])
		ne.PutUint32(b[cfgDNS6Port:], rawPort(c.DNS6.Port()))
	}
	ne.PutUint64(b[cfgNetns:], netnsCookie)
	return b
}

func encodePorts(es []portEntry) []byte {
	b := make([]byte, portsSize)
	ne := binary.NativeEndian
	for i, e := range es {
		o := i * peSize
		ne.PutUint16(b[o+peFirst:], e.first)
		ne.PutUint16(b[o+peLast:], e.last)
		b[o+peProtos] = byte(e.protos)
		ne.PutUint64(b[o+peExpires:], e.expires)
	}
	return b
}

func lpmKey(p netip.Prefix) []byte {
	a := p.Addr()
	var b []byte
	if a.Is4() {
		b = make([]byte, lpm4Size)
		a4 := a.As4()
		copy(b[4:], a4[:])
	} else {
		b = make([]byte, lpm6Size)
		a16 := a.As16()
		copy(b[4:], a16[:])
	}
	binary.NativeEndian.PutUint32(b, uint32(p.Bits()))
	return b
}

func addrKey(a netip.Addr) []byte {
	a16 := a.As16() // IPv4 becomes ::ffff:a.b.c.d
	return a16[:]
}

// destAddr turns the 16 address bytes and the family byte the programs
// record into the address the sandbox used.
func destAddr(a16 []byte, family byte, port uint16) netip.AddrPort {
	a := netip.AddrFrom16([16]byte(a16))
	if family == afInet {
		a = a.Unmap()
	}
	return netip.AddrPortFrom(a, port)
}

// rawEvent is an Event as the ring buffer holds it, before the boot-time
// stamp becomes a wall-clock time.
type rawEvent struct {
	boot uint64
	ev   Event
}

func decodeEvent(b []byte) (rawEvent, bool) {
	if len(b) < eventSize {
		return rawEvent{}, false
	}
	ne := binary.NativeEndian
	pt := ne.Uint64(b[evPidTgid:])
	return rawEvent{
		boot: ne.Uint64(b[evTime:]),
		ev: Event{
			PID:      uint32(pt >> 32),
			TID:      uint32(pt),
			CgroupID: ne.Uint64(b[evCgroup:]),
			Hook:     Hook(b[evHook]),
			Verdict:  Verdict(b[evVerdict]),
			Protocol: IPProto(b[evProto]),
			Dst:      destAddr(b[evAddr:evAddr+16], b[evFamily], ne.Uint16(b[evPort:])),
		},
	}, true
}

// rawDestination is a counter entry before its boot-time stamps become
// wall-clock times.
type rawDestination struct {
	first, last uint64
	d           Destination
}

func decodeDestination(k, v []byte) (rawDestination, bool) {
	if len(k) < ckSize || len(v) < cvSize {
		return rawDestination{}, false
	}
	ne := binary.NativeEndian
	return rawDestination{
		first: ne.Uint64(v[cvFirst:]),
		last:  ne.Uint64(v[cvLast:]),
		d: Destination{
			Dst:      destAddr(k[ckAddr:ckAddr+16], k[ckFamily], ne.Uint16(k[ckPort:])),
			Protocol: IPProto(k[ckProto]),
			Verdict:  Verdict(k[ckVerdict]),
			Count:    ne.Uint64(v[cvCount:]),
		},
	}, true
}
