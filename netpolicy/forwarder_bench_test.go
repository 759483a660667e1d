package netpolicy

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// BenchmarkForwarder fires UDP queries at a forwarder on loopback from
// parallel clients (each with its own socket, one query in flight) and
// reports queries/s: for an allowed name answered from the cache (with a
// fake AddrAllower), and for a refused name.
func BenchmarkForwarder(b *testing.B) {
	up := startUpstream(b)
	f := startForwarder(b, ForwarderConfig{
		Hosts:     []HostRule{mustHost(b, "allowed.test:443", true)},
		Upstreams: []string{up.addr},
		Allower:   &recorder{},
	})
	for _, c := range []struct {
		name  string
		qname string
		rcode int
	}{
		{"Cached", "allowed.test.", dns.RcodeSuccess},
		{"Refused", "denied.test.", dns.RcodeRefused},
	} {
		b.Run(c.name, func(b *testing.B) {
			q := new(dns.Msg)
			q.SetQuestion(c.qname, dns.TypeA)
			wire, err := q.Pack()
			if err != nil {
				b.Fatal(err)
			}
			// Warm the cache.
			if r, _, err := (&dns.Client{}).Exchange(q, f.Addr().String()); err != nil || r.Rcode != c.rcode {
				b.Fatalf("warm-up: %v %v", r, err)
			}
			var bad atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(f.Addr()))
				if err != nil {
					b.Error(err)
					return
				}
				defer conn.Close()
				buf := make([]byte, 1500)
				msg := append([]byte(nil), wire...)
				var id uint16
				for pb.Next() {
					id++
					msg[0], msg[1] = byte(id>>8), byte(id)
					conn.SetDeadline(time.Now().Add(5 * time.Second))
					if _, err := conn.Write(msg); err != nil {
						b.Error(err)
						return
					}
					n, err := conn.Read(buf)
					if err != nil {
						b.Error(err)
						return
					}
					if n < 12 || buf[0] != msg[0] || buf[1] != msg[1] || int(buf[3]&0x0f) != c.rcode {
						bad.Add(1)
					}
				}
			})
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "queries/s")
			if n := bad.Load(); n > 0 {
				b.Fatalf("%d wrong answers", n)
			}
		})
	}
}
