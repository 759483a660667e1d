package netpolicy

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func query(t *testing.T, network string, server netip.AddrPort, name string, qtype uint16, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(1232, false)
	}
	c := &dns.Client{Net: network, Timeout: 10 * time.Second}
	r, _, err := c.Exchange(m, server.String())
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, name, dns.TypeToString[qtype], err)
	}
	return r
}

func answerAddrs(m *dns.Msg) []string {
	var out []string
	for _, r := range m.Answer {
		switch r := r.(type) {
		case *dns.A:
			out = append(out, r.A.String())
		case *dns.AAAA:
			out = append(out, r.AAAA.String())
		}
	}
	return out
}

func TestForwarder(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	f := startForwarder(t, ForwarderConfig{
		Hosts: []HostRule{
			mustHost(t, "allowed.test:443", true),
			mustHost(t, "rebind.test:443", false),
			mustHost(t, "meta.test", false),
			mustHost(t, "mixed.test:443/tcp", false),
			mustHost(t, "cname.test:8443", false),
			mustHost(t, "svc.test", false),
			mustHost(t, "txt.test", false),
			mustHost(t, "*.wild.test:80", false),
			mustHost(t, "big.test", false),
			mustHost(t, "nx.test", false),
			mustHost(t, "fail.test", false),
		},
		Upstreams: []string{up.addr},
		Allower:   rec,
		Logf:      t.Logf,
	})
	fa := f.Addr()

	t.Run("AllowedPrivateOptIn", func(t *testing.T) {
		r := query(t, "udp", fa, "allowed.test.", dns.TypeA, false)
		if r.Rcode != dns.RcodeSuccess || !reflect.DeepEqual(answerAddrs(r), []string{"127.0.0.2"}) {
			t.Fatalf("answer %v", r)
		}
		// TTL 5 s: allowed for the 30 s floor.
		want := []allowCall{{netip.MustParseAddr("127.0.0.2"), "443", 0, 30 * time.Second}}
		if got := rec.take(); !reflect.DeepEqual(got, want) {
			t.Fatalf("AllowAddr calls %+v, want %+v", got, want)
		}
		// Again, over TCP and in upper case: from the cache, no new map
		// update needed (the entry outlives the cached answer).
		r = query(t, "tcp", fa, "ALLOWED.test.", dns.TypeA, true)
		if r.Rcode != dns.RcodeSuccess || !reflect.DeepEqual(answerAddrs(r), []string{"127.0.0.2"}) || r.Question[0].Name != "ALLOWED.test." {
			t.Fatalf("cached answer %v", r)
		}
		if n := up.count("allowed.test."); n != 1 {
			t.Fatalf("upstream asked %d times, want 1 (cache)", n)
		}
		if got := rec.take(); len(got) != 0 {
			t.Fatalf("cache hit updated the map: %+v", got)
		}
	})
	t.Run("Refused", func(t *testing.T) {
		for _, name := range []string{"denied.test.", "wild.test.", "allowed.test.evil."} {
			r := query(t, "udp", fa, name, dns.TypeA, false)
			if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
				t.Fatalf("%s: %v", name, r)
			}
			if n := up.count(name); n != 0 {
				t.Fatalf("%s was sent upstream", name)
			}
		}
	})
	t.Run("Rebinding", func(t *testing.T) {
		for _, name := range []string{"rebind.test.", "meta.test."} {
			r := query(t, "udp", fa, name, dns.TypeA, false)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
				t.Fatalf("%s: private answer not stripped: %v", name, r)
			}
		}
		r := query(t, "udp", fa, "mixed.test.", dns.TypeA, false)
		if !reflect.DeepEqual(answerAddrs(r), []string{"198.51.100.7"}) {
			t.Fatalf("mixed: %v", r)
		}
		want := []allowCall{{netip.MustParseAddr("198.51.100.7"), "443", TCP, 300 * time.Second}}
		if got := rec.take(); !reflect.DeepEqual(got, want) {
			t.Fatalf("AllowAddr calls %+v, want %+v", got, want)
		}
	})
	t.Run("CNAME", func(t *testing.T) {
		r := query(t, "udp", fa, "cname.test.", dns.TypeA, true)
		if len(r.Answer) != 2 || r.Answer[0].Header().Rrtype != dns.TypeCNAME || !reflect.DeepEqual(answerAddrs(r), []string{"198.51.100.8"}) {
			t.Fatalf("cname: %v", r)
		}
		if len(r.Extra) != 1 || r.Extra[0].Header().Rrtype != dns.TypeOPT {
			t.Fatalf("additional section not stripped to OPT: %v", r.Extra)
		}
		want := []allowCall{{netip.MustParseAddr("198.51.100.8"), "8443", 0, 60 * time.Second}}
		if got := rec.take(); !reflect.DeepEqual(got, want) {
			t.Fatalf("AllowAddr calls %+v, want %+v", got, want)
		}
	})
	t.Run("OtherTypes", func(t *testing.T) {
		r := query(t, "udp", fa, "svc.test.", dns.TypeHTTPS, true)
		if len(r.Answer) != 1 {
			t.Fatalf("https: %v", r)
		}
		h := r.Answer[0].(*dns.HTTPS)
		if len(h.Value) != 1 || h.Value[0].Key() != dns.SVCB_ALPN {
			t.Fatalf("hints not stripped: %v", h)
		}
		r = query(t, "udp", fa, "txt.test.", dns.TypeTXT, false)
		if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeTXT {
			t.Fatalf("txt: %v", r)
		}
		r = query(t, "udp", fa, "allowed.test.", dns.TypeAAAA, false)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Fatalf("AAAA: %v", r)
		}
		r = query(t, "udp", fa, "allowed.test.", dns.TypeANY, false)
		if r.Rcode != dns.RcodeNotImplemented {
			t.Fatalf("ANY: %v", r)
		}
		if got := rec.take(); len(got) != 0 {
			t.Fatalf("AllowAddr calls for non-address answers: %+v", got)
		}
	})
	t.Run("Wildcard", func(t *testing.T) {
		r := query(t, "udp", fa, "a.wild.test.", dns.TypeA, false)
		if !reflect.DeepEqual(answerAddrs(r), []string{"198.51.100.12"}) {
			t.Fatalf("wild: %v", r)
		}
		rec.take()
	})
	t.Run("Truncation", func(t *testing.T) {
		r := query(t, "udp", fa, "big.test.", dns.TypeA, false)
		if !r.Truncated {
			t.Fatalf("60 A records in 512 bytes without TC: %v %+v", r, f.Log())
		}
		r = query(t, "tcp", fa, "big.test.", dns.TypeA, false)
		if r.Truncated || len(r.Answer) != 60 {
			t.Fatalf("TCP: %d answers, TC %v", len(r.Answer), r.Truncated)
		}
		if got := rec.take(); len(got) != 60 {
			t.Fatalf("%d AllowAddr calls, want 60", len(got))
		}
	})
	t.Run("Failures", func(t *testing.T) {
		r := query(t, "udp", fa, "nx.test.", dns.TypeA, false)
		if r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
			t.Fatalf("nx: %v", r)
		}
		r = query(t, "udp", fa, "fail.test.", dns.TypeA, false)
		if r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("fail: %v", r)
		}
	})
	t.Run("Log", func(t *testing.T) {
		log := f.Log()
		find := func(name, typ string, o Outcome) DNSQuery {
			t.Helper()
			for _, q := range log.Queries {
				if q.Name == name && q.Type == typ && q.Outcome == o {
					return q
				}
			}
			t.Fatalf("no log entry %s %s %s in %+v", name, typ, o, log.Queries)
			return DNSQuery{}
		}
		if q := find("allowed.test", "A", OutcomeAllowed); q.Count != 2 || !slices.Equal(q.Answers, []netip.Addr{netip.MustParseAddr("127.0.0.2")}) {
			t.Errorf("allowed.test: %+v", q)
		}
		if q := find("denied.test", "A", OutcomeRefused); q.Count != 1 || q.Rcode != "REFUSED" {
			t.Errorf("denied.test: %+v", q)
		}
		if q := find("meta.test", "A", OutcomeAllowed); !slices.Equal(q.Stripped, []netip.Addr{netip.MustParseAddr("169.254.169.254")}) || len(q.Answers) != 0 {
			t.Errorf("meta.test: %+v", q)
		}
		if q := find("fail.test", "A", OutcomeFailed); q.Count != 1 || q.Rcode != "SERVFAIL" {
			t.Errorf("fail.test: %+v", q)
		}
		find("allowed.test", "ANY", OutcomeRefused)
	})
}

func TestForwarder_UpstreamDown(t *testing.T) {
	// A UDP port nobody listens on: the query fails at once (port
	// unreachable), and the next upstream answers.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	up := startUpstream(t)
	f := startForwarder(t, ForwarderConfig{
		Hosts:     []HostRule{mustHost(t, "allowed.test", true)},
		Upstreams: []string{dead, up.addr},
	})
	if r := query(t, "udp", f.Addr(), "allowed.test.", dns.TypeA, false); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("%v", r)
	}
	if n := up.count("allowed.test."); n != 1 {
		t.Fatalf("second upstream asked %d times, want 1", n)
	}
	// Only the dead one: SERVFAIL.
	f2 := startForwarder(t, ForwarderConfig{
		Hosts:     []HostRule{mustHost(t, "allowed.test", true)},
		Upstreams: []string{dead},
	})
	if r := query(t, "udp", f2.Addr(), "allowed.test.", dns.TypeA, false); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("%v", r)
	}
}

func TestResolvConfUpstreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(path, []byte("# comment\nnameserver 127.0.0.53\nnameserver ::1\noptions edns0\n"), 0o600)
	got, err := resolvConfUpstreams(path)
	if err != nil || !reflect.DeepEqual(got, []string{"127.0.0.53:53", "[::1]:53"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	os.WriteFile(path, []byte("search example.org\n"), 0o600)
	if _, err := resolvConfUpstreams(path); err == nil {
		t.Fatal("no nameserver: no error")
	}
}
