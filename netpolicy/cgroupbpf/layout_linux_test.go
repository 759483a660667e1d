package cgroupbpf

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestEncoding(t *testing.T) {
	ne := binary.NativeEndian
	b := encodePorts([]portEntry{{first: 80, last: 90, protos: UDP, expires: 12345}})
	if len(b) != portsSize || ne.Uint16(b[peFirst:]) != 80 || ne.Uint16(b[peLast:]) != 90 || b[peProtos] != byte(UDP) ||
		ne.Uint64(b[peExpires:]) != 12345 || b[peSize+peProtos] != 0 {
		t.Errorf("encodePorts: %x", b[:2*peSize])
	}
	if k := lpmKey(netip.MustParsePrefix("10.0.0.0/8")); len(k) != lpm4Size || ne.Uint32(k) != 8 || k[4] != 10 {
		t.Errorf("lpmKey v4: %x", k)
	}
	if k := lpmKey(netip.MustParsePrefix("2001:db8::/32")); len(k) != lpm6Size || ne.Uint32(k) != 32 || k[4] != 0x20 || k[5] != 0x01 {
		t.Errorf("lpmKey v6: %x", k)
	}
	// user_port holds the port in network order.
	var raw [4]byte
	ne.PutUint32(raw[:], rawPort(53))
	if raw != [4]byte{0, 53, 0, 0} {
		t.Errorf("rawPort(53) in memory: %x", raw)
	}
	c := encodeConfig(Config{Mode: ModePolicy, AllowHostLoopback: true,
		DNS: netip.MustParseAddrPort("10.0.0.53:5353"), DNS6: netip.MustParseAddrPort("[fd00::53]:53")}, 77)
	if ne.Uint32(c[cfgMode:]) != uint32(ModePolicy) || ne.Uint32(c[cfgFlags:]) != cfgFlagHostLoopback ||
		string(c[cfgDNS4Addr:cfgDNS4Addr+4]) != "\x0a\x00\x00\x35" || ne.Uint32(c[cfgDNS4Port:]) != rawPort(5353) ||
		c[cfgDNS6Addr] != 0xfd || c[cfgDNS6Addr+15] != 0x53 || ne.Uint32(c[cfgDNS6Port:]) != rawPort(53) || ne.Uint64(c[cfgNetns:]) != 77 {
		t.Errorf("encodeConfig: %x", c)
	}
}

func TestDecodeEvent(t *testing.T) {
	ne := binary.NativeEndian
	b := make([]byte, eventSize)
	ne.PutUint64(b[evTime:], 42)
	ne.PutUint64(b[evCgroup:], 7)
	ne.PutUint64(b[evPidTgid:], 1234<<32|1240)
	a := netip.MustParseAddr("::ffff:10.1.2.3").As16()
	copy(b[evAddr:], a[:])
	ne.PutUint16(b[evPort:], 443)
	b[evProto], b[evVerdict], b[evFamily], b[evHook] = 6, byte(VerdictDenied), afInet, byte(HookConnect4)
	raw, ok := decodeEvent(b)
	want := Event{PID: 1234, TID: 1240, CgroupID: 7, Hook: HookConnect4, Verdict: VerdictDenied, Protocol: 6,
		Dst: netip.MustParseAddrPort("10.1.2.3:443")}
	if !ok || raw.boot != 42 || raw.ev != want {
		t.Errorf("decodeEvent: %+v %v, want %+v", raw, ok, want)
	}
	b[evFamily] = afInet6 // on an AF_INET6 socket the mapped form stays
	if raw, _ := decodeEvent(b); raw.ev.Dst != netip.MustParseAddrPort("[::ffff:10.1.2.3]:443") {
		t.Errorf("decodeEvent AF_INET6: %v", raw.ev.Dst)
	}
	if _, ok := decodeEvent(b[:10]); ok {
		t.Error("decodeEvent of a short record succeeded")
	}
}
