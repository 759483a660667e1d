package netpolicy

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairnfs/cairn/netpolicy/cgroupbpf"
)

// fakeUpstream is a DNS server on 127.0.0.1 (UDP and TCP, one port) with a
// fixed zone, counting the queries per name.
type fakeUpstream struct {
	addr string
	mu   sync.Mutex
	seen map[string]int
}

func (u *fakeUpstream) count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[name]
}

func rr(t testing.TB, s string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// upstreamZone is the fake upstream's data: name -> answer records; names
// absent are NXDOMAIN, "fail.test." is SERVFAIL.
func upstreamZone(t testing.TB) map[string][]dns.RR {
	z := map[string][]dns.RR{
		"allowed.test.": {rr(t, "allowed.test. 5 IN A 127.0.0.2")},
		"rebind.test.":  {rr(t, "rebind.test. 60 IN A 10.0.0.5")},
		"meta.test.":    {rr(t, "meta.test. 60 IN A 169.254.169.254")},
		"mixed.test.":   {rr(t, "mixed.test. 300 IN A 198.51.100.7"), rr(t, "mixed.test. 300 IN A 10.0.0.6")},
		"cname.test.": {
			rr(t, "cname.test. 60 IN CNAME target.other."),
			rr(t, "target.other. 60 IN A 198.51.100.8"),
			rr(t, "evil.test. 60 IN A 198.51.100.9"),
		},
		"svc.test.":    {rr(t, `svc.test. 60 IN HTTPS 1 . alpn="h2" ipv4hint="198.51.100.10" ipv6hint="2001:db8::10"`)},
		"txt.test.":    {rr(t, `txt.test. 60 IN TXT "hello"`), rr(t, "txt.test. 60 IN A 198.51.100.11")},
		"a.wild.test.": {rr(t, "a.wild.test. 60 IN A 198.51.100.12")},
	}
	var big []dns.RR
	for i := range 60 {
		big = append(big, rr(t, "big.test. 60 IN A 198.51.100."+itoa(i+20)))
	}
	z["big.test."] = big
	return z
}

func itoa(i int) string { return netip.AddrFrom4([4]byte{0, 0, 0, byte(i)}).String()[6:] }

func startUpstream(t testing.TB) *fakeUpstream {
	t.Helper()
	zone := upstreamZone(t)
	u := &fakeUpstream{seen: map[string]int{}}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		q := req.Question[0]
		u.mu.Lock()
		u.seen[strings.ToLower(q.Name)]++
		u.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(req)
		m.RecursionAvailable = true
		m.Compress = true
		switch recs, ok := zone[strings.ToLower(q.Name)]; {
		case q.Name == "fail.test.":
			m.Rcode = dns.RcodeServerFailure
		case !ok:
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{rr(t, "test. 60 IN SOA ns.test. host.test. 1 60 60 60 60")}
		default:
			for _, r := range recs {
				if r.Header().Rrtype == q.Qtype || r.Header().Rrtype == dns.TypeCNAME || q.Name == "cname.test." || q.Name == "txt.test." {
					m.Answer = append(m.Answer, r)
				}
			}
			m.Extra = []dns.RR{rr(t, "glue.test. 60 IN A 198.51.100.99")}
		}
		if opt := req.IsEdns0(); opt != nil {
			m.SetEdns0(opt.UDPSize(), false)
		}
		w.WriteMsg(m)
	})
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", l.Addr().String())
		if err != nil {
			l.Close()
			continue
		}
		u.addr = l.Addr().String()
		for _, s := range []*dns.Server{{Listener: l, Handler: h}, {PacketConn: pc, Handler: h}} {
			started := make(chan struct{})
			s.NotifyStartedFunc = func() { close(started) }
			done := make(chan struct{})
			go func() { defer close(done); s.ActivateAndServe() }()
			<-started
			t.Cleanup(func() { s.Shutdown(); <-done })
		}
		return u
	}
	t.Fatal("no port for the fake upstream")
	return nil
}

// allowCall is one AllowAddr call.
type allowCall struct {
	Addr   netip.Addr
	Ports  string
	Protos cgroupbpf.Proto
	TTL    time.Duration
}

// recorder is an AddrAllower that records the calls.
type recorder struct {
	mu    sync.Mutex
	calls []allowCall
}

func (r *recorder) AllowAddr(addr netip.Addr, ports []cgroupbpf.PortRange, protos cgroupbpf.Proto, ttl time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, allowCall{addr, portsString(ports, 0), protos, ttl})
	return nil
}

func (r *recorder) take() []allowCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func mustHost(t testing.TB, s string, private bool) HostRule {
	t.Helper()
	r, err := ParseAllowHost(s)
	if err != nil {
		t.Fatal(err)
	}
	r.AllowPrivate = private
	return r
}

func startForwarder(t testing.TB, cfg ForwarderConfig) *Forwarder {
	t.Helper()
	f, err := StartForwarder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}
