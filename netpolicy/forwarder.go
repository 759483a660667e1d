package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/cairnfs/cairn/netpolicy/cgroupbpf"
)

// AddrAllower puts an address that a DNS answer is about to hand out into
// the egress maps. *cgroupbpf.Programs satisfies it.
type AddrAllower interface {
	AllowAddr(addr netip.Addr, ports []cgroupbpf.PortRange, protos cgroupbpf.Proto, ttl time.Duration) error
}

var _ AddrAllower = (*cgroupbpf.Programs)(nil)

// ForwarderConfig configures a Forwarder. The zero value refuses every
// name, forwarding to the resolvers of /etc/resolv.conf.
type ForwarderConfig struct {
	// Hosts is the names the forwarder answers (Policy.AllowHosts); every
	// other name gets REFUSED without a query upstream.
	Hosts []HostRule
	// Allower receives every address the forwarder answers, before the
	// answer is sent. Nil: addresses are answered but allowed nowhere
	// (tests, audit-only use).
	Allower AddrAllower
	// Upstreams is the resolvers to forward to, as host:port ("127.0.0.53:53",
	// "[2001:db8::1]:53"), tried in order. Default: the nameservers of
	// ResolvConf, port 53.
	Upstreams []string
	// ResolvConf is where the default upstreams come from; default
	// /etc/resolv.conf.
	ResolvConf string
	// Listen is the IPv4 address the forwarder listens on (UDP and TCP,
	// one port picked at random); default 127.0.0.1.
	Listen netip.Addr
	// Listen6 is the IPv6 address; default ::1. If it cannot be bound (no
	// IPv6), the forwarder has no IPv6 address and Addr6 is invalid:
	// IPv6 queries are then policed like any other destination (denied).
	Listen6 netip.Addr
	// MinTTL is the floor of the time an answered address stays allowed:
	// max(answer TTL, MinTTL). Default 30 s, so that clients that ignore
	// short TTLs, or connect a little after resolving, still get through.
	MinTTL time.Duration
	// Timeout bounds each upstream exchange; default 2 s. A query whose
	// upstreams all fail or time out gets SERVFAIL.
	Timeout time.Duration
	// CacheEntries is how many answers the positive cache holds; default
	// 4096. Negative: no cache.
	CacheEntries int
	// MaxLogNames bounds the distinct (name, type, outcome) entries of the
	// query log; default 10000. Queries beyond it are counted in
	// DNSLog.Dropped.
	MaxLogNames int
	// Logf receives diagnostics (upstream failures, map errors); default
	// none.
	Logf func(format string, args ...any)
}

// Validate reports whether the config can start a forwarder.
func (c ForwarderConfig) Validate() error {
	for _, r := range c.Hosts {
		if err := r.validate(); err != nil {
			return err
		}
	}
	for _, u := range c.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			return ruleErr("upstream "+strconv.Quote(u), "not an address and port", "write 127.0.0.53:53 or [2001:db8::1]:53")
		}
	}
	if c.Listen.IsValid() && !c.Listen.Is4() {
		return ruleErr("forwarder listen "+c.Listen.String(), "not an IPv4 address", "")
	}
	if c.Listen6.IsValid() && (!c.Listen6.Is6() || c.Listen6.Is4In6()) {
		return ruleErr("forwarder listen6 "+c.Listen6.String(), "not an IPv6 address", "")
	}
	if c.MinTTL < 0 || c.Timeout < 0 {
		return ruleErr("forwarder", "negative MinTTL or Timeout", "")
	}
	return nil
}

// Defaults.
const (
	DefaultMinTTL       = 30 * time.Second
	DefaultDNSTimeout   = 2 * time.Second
	defaultCacheEntries = 4096
	defaultMaxLogNames  = 10000
	// maxCacheTTL caps how long an answer stays in the cache.
	maxCacheTTL = time.Hour
	// ednsSize is the UDP payload size the forwarder offers and asks for.
	ednsSize = 1232
)

// Forwarder is the DNS forwarder of one sandbox: see the package doc.
type Forwarder struct {
	cfg     ForwarderConfig
	addr4   netip.AddrPort
	addr6   netip.AddrPort
	servers []*dns.Server
	done    sync.WaitGroup
	cache   *answerCache
	log     *queryLog
	udp     *dns.Client
	tcp     *dns.Client
	allower atomic.Pointer[AddrAllower]

	mu     sync.Mutex
	closed bool
}

// StartForwarder listens (UDP and TCP on cfg.Listen and cfg.Listen6, one
// port each) and serves until Close.
func StartForwarder(cfg ForwarderConfig) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Listen.IsValid() {
		cfg.Listen = netip.MustParseAddr("127.0.0.1")
	}
	if !cfg.Listen6.IsValid() {
		cfg.Listen6 = netip.IPv6Loopback()
	}
	if cfg.MinTTL == 0 {
		cfg.MinTTL = DefaultMinTTL
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultDNSTimeout
	}
	if cfg.CacheEntries == 0 {
		cfg.CacheEntries = defaultCacheEntries
	}
	if cfg.MaxLogNames <= 0 {
		cfg.MaxLogNames = defaultMaxLogNames
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if len(cfg.Upstreams) == 0 {
		ups, err := resolvConfUpstreams(cfg.ResolvConf)
		if err != nil {
			return nil, err
		}
		cfg.Upstreams = ups
	}
	f := &Forwarder{
		cfg:   cfg,
		cache: newAnswerCache(cfg.CacheEntries),
		log:   newQueryLog(cfg.MaxLogNames),
		udp:   &dns.Client{Net: "udp", Timeout: cfg.Timeout, UDPSize: ednsSize},
		tcp:   &dns.Client{Net: "tcp", Timeout: cfg.Timeout},
	}
	if cfg.Allower != nil {
		f.allower.Store(&cfg.Allower)
	}
	var err error
	if f.addr4, err = f.listen(cfg.Listen); err != nil {
		f.Close()
		return nil, err
	}
	if f.addr6, err = f.listen(cfg.Listen6); err != nil {
		cfg.Logf("netpolicy: DNS forwarder without IPv6 (IPv6 queries will be denied): %v", err)
		f.addr6 = netip.AddrPort{}
	}
	return f, nil
}

// resolvConfUpstreams reads the nameservers of a resolv.conf.
func resolvConfUpstreams(path string) ([]string, error) {
	if path == "" {
		path = "/etc/resolv.conf"
	}
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("netpolicy: DNS upstreams from %s: %w (pass the upstream resolvers explicitly)", path, err)
	}
	var ups []string
	for _, s := range cc.Servers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		ups = append(ups, netip.AddrPortFrom(a, 53).String())
	}
	if len(ups) == 0 {
		return nil, fmt.Errorf("netpolicy: no nameserver in %s: pass the upstream resolvers explicitly", path)
	}
	return ups, nil
}

// listen binds UDP and TCP on the same port of a and starts serving.
func (f *Forwarder) listen(a netip.Addr) (netip.AddrPort, error) {
	var lastErr error
	for range 20 {
		l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("netpolicy: DNS forwarder listen on %v: %w", a, err)
		}
		ap := l.Addr().(*net.TCPAddr).AddrPort()
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err != nil {
			l.Close() // the UDP port is taken: try another
			lastErr = err
			continue
		}
		for _, s := range []*dns.Server{
			{PacketConn: pc, Handler: f, UDPSize: ednsSize},
			{Listener: l, Handler: f},
		} {
			started := make(chan struct{})
			s.NotifyStartedFunc = func() { close(started) }
			f.servers = append(f.servers, s)
			f.done.Go(func() {
				if err := s.ActivateAndServe(); err != nil {
					f.cfg.Logf("netpolicy: DNS forwarder on %v stopped: %v", ap, err)
				}
			})
			<-started
		}
		return netip.AddrPortFrom(a.Unmap(), ap.Port()), nil
	}
	return netip.AddrPort{}, fmt.Errorf("netpolicy: DNS forwarder: no port free for both UDP and TCP on %v: %w", a, lastErr)
}

// setAllower sets the AddrAllower once the programs are loaded (they need
// the forwarder's addresses first), and empties the cache, whose answers
// were not put in these maps.
func (f *Forwarder) setAllower(a AddrAllower) {
	f.allower.Store(&a)
	f.cache.clear()
}

// Addr is the IPv4 address and port the forwarder serves on (UDP and TCP):
// cgroupbpf.Config.DNS.
func (f *Forwarder) Addr() netip.AddrPort { return f.addr4 }

// Addr6 is the IPv6 address and port (cgroupbpf.Config.DNS6), invalid if
// the forwarder could not listen on IPv6.
func (f *Forwarder) Addr6() netip.AddrPort { return f.addr6 }

// Log returns the query log so far.
func (f *Forwarder) Log() DNSLog { return f.log.snapshot() }

// Close stops serving and waits for the servers to stop.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	var errs []error
	for _, s := range f.servers {
		if err := s.Shutdown(); err != nil {
			errs = append(errs, err)
		}
	}
	f.done.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netpolicy: stop DNS forwarder: %w", err)
	}
	return nil
}

// ServeDNS answers one query (dns.Handler).
func (f *Forwarder) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	resp := f.Answer(context.Background(), req, tcp)
	if resp == nil {
		return
	}
	if err := w.WriteMsg(resp); err != nil {
		f.cfg.Logf("netpolicy: DNS reply to %v: %v", w.RemoteAddr(), err)
	}
}

// Answer computes the reply to req (nil: send nothing). tcp says whether
// the reply goes over TCP (no size limit) or UDP (truncated to the client's
// EDNS size, or 512 bytes).
func (f *Forwarder) Answer(ctx context.Context, req *dns.Msg, tcp bool) *dns.Msg {
	if req.Response || len(req.Question) != 1 {
		if req.Response {
			return nil
		}
		return f.reply(req, dns.RcodeFormatError, tcp)
	}
	q := req.Question[0]
	name := canonicalName(q.Name)
	qtype := q.Qtype
	if req.Opcode != dns.OpcodeQuery {
		f.log.record(name, qtype, OutcomeRefused, dns.RcodeNotImplemented, nil, nil)
		return f.reply(req, dns.RcodeNotImplemented, tcp)
	}
	rules := matchingRules(f.cfg.Hosts, name)
	if q.Qclass != dns.ClassINET || len(rules) == 0 {
		f.log.record(name, qtype, OutcomeRefused, dns.RcodeRefused, nil, nil)
		return f.reply(req, dns.RcodeRefused, tcp)
	}
	switch qtype {
	case dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB:
		f.log.record(name, qtype, OutcomeRefused, dns.RcodeNotImplemented, nil, nil)
		return f.reply(req, dns.RcodeNotImplemented, tcp)
	}
	key := cacheKey{name: name, qtype: qtype}
	if c, ok := f.cache.get(key, time.Now()); ok {
		f.log.record(name, qtype, OutcomeAllowed, c.msg.Rcode, c.addrs, c.stripped)
		return f.finish(req, c.msg, c.age(time.Now()), tcp)
	}
	up, err := f.exchange(ctx, name, qtype)
	if err != nil {
		f.cfg.Logf("netpolicy: DNS %s %s: %v", name, dns.TypeToString[qtype], err)
		f.log.record(name, qtype, OutcomeFailed, dns.RcodeServerFailure, nil, nil)
		return f.reply(req, dns.RcodeServerFailure, tcp)
	}
	fl := filterAnswer(up, name, qtype, rules)
	if err := f.allow(fl, rules); err != nil {
		f.cfg.Logf("netpolicy: DNS %s %s: allow answers: %v", name, dns.TypeToString[qtype], err)
		f.log.record(name, qtype, OutcomeFailed, dns.RcodeServerFailure, nil, fl.stripped)
		return f.reply(req, dns.RcodeServerFailure, tcp)
	}
	f.log.record(name, qtype, OutcomeAllowed, fl.msg.Rcode, fl.addrs(), fl.stripped)
	if ttl := fl.cacheTTL(); ttl > 0 {
		f.cache.put(key, &cached{msg: fl.msg, addrs: fl.addrs(), stripped: fl.stripped, stored: time.Now(), ttl: min(ttl, maxCacheTTL)})
	}
	return f.finish(req, fl.msg, 0, tcp)
}

// exchange asks the upstreams in turn: UDP, then TCP if the answer was
// truncated.
func (f *Forwarder) exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = true
	m.SetEdns0(ednsSize, false)
	var errs []error
	for _, up := range f.cfg.Upstreams {
		r, _, err := f.udp.ExchangeContext(ctx, m, up)
		if err == nil && r.Truncated {
			r, _, err = f.tcp.ExchangeContext(ctx, m, up)
		}
		if err == nil && r.Id != m.Id {
			err = errors.New("reply with another ID")
		}
		if err == nil && (r.Rcode == dns.RcodeServerFailure || r.Rcode == dns.RcodeRefused) {
			err = fmt.Errorf("upstream answered %s", dns.RcodeToString[r.Rcode])
		}
		if err == nil {
			return r, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
	}
	return nil, errors.Join(errs...)
}

// allow inserts the answer's addresses: each address gets the ports of
// every rule that allows it (rules without AllowPrivate do not allow
// special addresses), for max(TTL, MinTTL).
func (f *Forwarder) allow(fl *filtered, rules []HostRule) error {
	ap := f.allower.Load()
	if ap == nil {
		return nil
	}
	allower := *ap
	for _, a := range fl.kept {
		ttl := max(time.Duration(a.ttl)*time.Second, f.cfg.MinTTL)
		special := IsSpecialAddr(a.addr)
		for _, r := range rules {
			if special && !r.AllowPrivate {
				continue
			}
			if err := allower.AllowAddr(a.addr, r.Ports, r.Protocols, ttl); err != nil {
				return err
			}
		}
	}
	return nil
}

// reply is an answer without records.
func (f *Forwarder) reply(req *dns.Msg, rcode int, tcp bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = true
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ednsSize, false)
	}
	return m
}

// finish makes the reply to req from a filtered upstream answer, aged by
// age (TTLs decremented), cut to the client's UDP size.
func (f *Forwarder) finish(req, ans *dns.Msg, age uint32, tcp bool) *dns.Msg {
	m := ans.Copy()
	m.Id = req.Id
	m.Question = req.Question
	m.Response = true
	m.Opcode = dns.OpcodeQuery
	m.RecursionDesired = req.RecursionDesired
	m.RecursionAvailable = true
	m.Authoritative = false
	m.AuthenticatedData = false
	m.CheckingDisabled = req.CheckingDisabled
	m.Compress = true
	if age > 0 {
		for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
			for _, rr := range sec {
				h := rr.Header()
				h.Ttl = h.Ttl - min(age, h.Ttl)
			}
		}
	}
	m.Extra = nil
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ednsSize, false)
		size = max(dns.MinMsgSize, min(int(opt.UDPSize()), ednsSize))
	}
	if !tcp {
		m.Truncate(size)
	}
	return m
}

// matchingRules is the rules allowing name.
func matchingRules(rules []HostRule, name string) []HostRule {
	var out []HostRule
	for _, r := range rules {
		if r.Matches(name) {
			out = append(out, r)
		}
	}
	return out
}

// qtypeString names a query type.
func qtypeString(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

func rcodeString(r int) string {
	if s, ok := dns.RcodeToString[r]; ok {
		return s
	}
	return "RCODE" + strconv.Itoa(r)
}
