package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/netpolicy"
	"github.com/cairnfs/cairn/netpolicy/httpproxy"
	"github.com/cairnfs/cairn/sandbox"
	"github.com/cairnfs/cairn/sandbox/cgroups"
)

// netFlags are cairn run's egress policy flags.
func netFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "net", Usage: "network: none (own namespace, loopback only), policy (default deny + the rules) or unrestricted (default: policy when rules are given, else none)"},
		&cli.StringSliceFlag{Name: "allow", Usage: "allow `CIDR[:PORTS]`, e.g. 10.0.0.0/8:443, 1.2.3.4:80,443, [2001:db8::/32]:8000-9000/tcp (repeatable)"},
		&cli.StringSliceFlag{Name: "allow-host", Usage: "allow `NAME[:PORTS]` and what it resolves to, e.g. api.github.com:443, *.pypi.org (repeatable)"},
		&cli.StringSliceFlag{Name: "http-methods", Usage: "only these methods for a host, through cairn's HTTP proxy: `HOST=GET,HEAD` (repeatable)"},
		&cli.BoolFlag{Name: "http-intercept", Usage: "enforce --http-methods over HTTPS too: the proxy terminates TLS to those hosts with a CA made for this run, which the sandbox trusts (" + caBundlePath + ")"},
		&cli.StringFlag{Name: "net-policy", Usage: "egress rules from `FILE` (YAML or JSON; see README)"},
		&cli.StringSliceFlag{Name: "dns-upstream", Usage: "the resolvers cairn's DNS forwarder asks, `HOST:PORT` (default: /etc/resolv.conf's)"},
	}
}

// Where the sandbox finds the interception CA (--http-intercept): its
// /run, read-only.
const (
	caBundlePath = "/run/cairn/ca-bundle.pem" // the host's roots and the CA
	caCertPath   = "/run/cairn/ca.pem"        // the CA alone
)

// caEnv are the variables that point common clients at the sandbox's
// trust store: OpenSSL (and so Python's ssl, curl, git), requests, curl,
// git, pip, and Node (which adds NODE_EXTRA_CA_CERTS to its own roots).
var caEnv = []string{
	"SSL_CERT_FILE=" + caBundlePath,
	"REQUESTS_CA_BUNDLE=" + caBundlePath,
	"CURL_CA_BUNDLE=" + caBundlePath,
	"GIT_SSL_CAINFO=" + caBundlePath,
	"PIP_CERT=" + caBundlePath,
	"NODE_EXTRA_CA_CERTS=" + caCertPath,
}

// netOptions is the egress part of a run.
type netOptions struct {
	Policy    netpolicy.Policy
	Upstreams []string
}

// policyFromFlags builds the egress policy: the file's rules, then the
// flags'; the mode is --net, else the file's, else policy when there are
// rules and none without.
func policyFromFlags(c *cli.Context) (netOptions, error) {
	var p netpolicy.Policy
	var err error
	if f := c.String("net-policy"); f != "" {
		if p, err = netpolicy.ReadPolicyFile(f); err != nil {
			return netOptions{}, usageError{err}
		}
	}
	for _, s := range c.StringSlice("allow") {
		r, err := netpolicy.ParseAllow(s)
		if err != nil {
			return netOptions{}, usageError{err}
		}
		p.Allow = append(p.Allow, r)
	}
	for _, s := range c.StringSlice("allow-host") {
		r, err := netpolicy.ParseAllowHost(s)
		if err != nil {
			return netOptions{}, usageError{err}
		}
		p.AllowHosts = append(p.AllowHosts, r)
	}
	for _, s := range c.StringSlice("http-methods") {
		r, err := netpolicy.ParseHTTPMethods(s)
		if err != nil {
			return netOptions{}, usageError{err}
		}
		p.HTTP = append(p.HTTP, r)
	}
	if c.Bool("http-intercept") {
		p.HTTPIntercept = true
	}
	rules := len(p.Allow)+len(p.AllowHosts)+len(p.HTTP) > 0 || p.HTTPIntercept
	switch m := c.String("net"); {
	case m != "":
		if p.Mode, err = netpolicy.ParseMode(m); err != nil {
			return netOptions{}, usageError{err}
		}
	case c.String("net-policy") == "" && rules:
		p.Mode = netpolicy.ModePolicy
	}
	if rules && p.Mode != netpolicy.ModePolicy {
		return netOptions{}, usageError{fmt.Errorf("--net %s takes no --allow, --allow-host, --http-methods or --http-intercept (they are for --net policy)", p.Mode)}
	}
	if err := p.Validate(); err != nil {
		return netOptions{}, usageError{err}
	}
	return netOptions{Policy: p, Upstreams: c.StringSlice("dns-upstream")}, nil
}

// egress enforces a run's egress policy: the BPF programs and the DNS
// forwarder (netpolicy.Session) attached to the sandbox's cgroup before
// anything of it runs, and, for hosts with method rules, the HTTP proxy
// the sandbox must go through.
type egress struct {
	opts    netOptions
	home    string
	bpffs   string
	session *netpolicy.Session
	proxy   *httpproxy.Proxy
}

// setup prepares the spec: the host's network namespace (the policy is on
// the cgroup), the proxy and its environment, and the hook that starts the
// session.
func (e *egress) setup(ctx context.Context, spec *sandbox.Spec, stderr func(string)) error {
	p := e.opts.Policy
	if p.Mode == netpolicy.ModeNone {
		return nil
	}
	if p.Mode == netpolicy.ModeUnrestricted {
		stderr("cairn: --net unrestricted: the sandbox's egress is not restricted (only audited)")
	}
	spec.HostNetwork = true
	session := p
	if len(p.HTTP) > 0 {
		// Hosts with method rules are reachable only through the proxy:
		// the sandbox may not resolve them (the forwarder refuses them),
		// so no address of theirs ever enters the BPF maps; the proxy,
		// outside the sandbox, resolves and dials them.
		var rules []httpproxy.HostRule
		for _, h := range p.HTTP {
			r := httpproxy.HostRule{Host: h.Host, Methods: h.Methods}
			for _, hr := range p.HostRules(h.Host) {
				for _, pr := range hr.Ports {
					for port := int(pr.First); port <= int(pr.Last) && port-int(pr.First) < 1024; port++ {
						r.Ports = append(r.Ports, uint16(port))
					}
				}
			}
			rules = append(rules, r)
		}
		cfg := httpproxy.Config{
			Rules:         rules,
			Allowed:       func(host string, port uint16) bool { return allows(p, host, port) },
			AllowInternal: func(host string, a netip.Addr, port uint16) bool { return allowsInternal(p, host, a, port) },
			Resolver:      upstreamResolver(e.opts.Upstreams),
		}
		if p.HTTPIntercept {
			if err := intercept(&cfg, spec); err != nil {
				return err
			}
		}
		proxy, err := httpproxy.Start(cfg, "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("the HTTP proxy for --http-methods: %w", err)
		}
		e.proxy = proxy
		if err := addEnv(spec, proxy.Env()); err != nil {
			proxy.Close()
			e.proxy = nil
			return err
		}
		session.AllowHosts = nil
		for _, hr := range p.AllowHosts {
			if _, ruled := p.Methods(hr.Name); !ruled {
				session.AllowHosts = append(session.AllowHosts, hr)
			}
		}
		session.HTTP, session.HTTPIntercept = nil, false
		ap := proxy.Addr().(*net.TCPAddr).AddrPort()
		session.Allow = append(session.Allow, netpolicy.CIDRRule{Prefix: netip.PrefixFrom(ap.Addr().Unmap(), 32),
			Ports: []netpolicy.PortRange{{First: ap.Port(), Last: ap.Port()}}, Protocols: netpolicy.TCP})
	}
	var b [6]byte
	rand.Read(b[:])
	e.bpffs = filepath.Join(e.home, "run", "bpf-"+hex.EncodeToString(b[:]))
	spec.BeforeStart = func(g *cgroups.Group, _ int) error {
		s, err := netpolicy.Start(ctx, netpolicy.Config{Policy: session, CgroupPath: g.Path(), BPFFS: e.bpffs, Upstreams: e.opts.Upstreams})
		if err != nil {
			// Fail closed: nothing runs without the policy asked for.
			return fmt.Errorf("the egress policy (--net %s) cannot be enforced here, so nothing runs: %w; "+
				"it needs BPF (root with CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN; no seccomp profile denying bpf) and cgroup2; "+
				"without it, --net none gives the sandbox no network at all", p.Mode, err)
		}
		e.session = s
		return nil
	}
	return nil
}

// intercept turns TLS interception on for the proxy cfg: a CA made for
// this run, constrained to the hosts with method rules, whose key stays in
// this process's memory (never on disk, never in the sandbox); the sandbox
// gets its certificate, with the host's roots, read-only in its /run, and
// the variables that point clients at it.
func intercept(cfg *httpproxy.Config, spec *sandbox.Spec) error {
	rootsFile, err := httpproxy.SystemRootsFile()
	if err != nil {
		return fmt.Errorf("--http-intercept: the sandbox's trust store: %w", err)
	}
	roots, err := httpproxy.ReadRoots(rootsFile)
	if err != nil {
		return fmt.Errorf("--http-intercept: the sandbox's trust store: %w (set SSL_CERT_FILE to a PEM bundle of roots)", err)
	}
	var hosts []string
	for _, r := range cfg.Rules {
		hosts = append(hosts, r.Host)
	}
	var id [6]byte
	rand.Read(id[:])
	certPEM, keyPEM, ca, err := httpproxy.NewCA("cairn run "+hex.EncodeToString(id[:]), hosts...)
	if err != nil {
		return fmt.Errorf("--http-intercept: the interception CA: %w", err)
	}
	clear(keyPEM) // the key lives on in ca only, for the proxy
	cfg.CA = &ca
	spec.RunFiles = append(spec.RunFiles,
		sandbox.RunFile{Path: caBundlePath, Data: httpproxy.TrustBundle(roots, certPEM)},
		sandbox.RunFile{Path: caCertPath, Data: certPEM})
	return addEnv(spec, caEnv)
}

// addEnv adds cairn's variables to the sandbox's environment; one the
// caller set with --env too is a usage error rather than a silent choice.
func addEnv(spec *sandbox.Spec, vars []string) error {
	for _, kv := range vars {
		name, _, _ := strings.Cut(kv, "=")
		for _, have := range spec.Env {
			if strings.HasPrefix(have, name+"=") {
				return usageError{fmt.Errorf("--env %s: cairn run sets %s for the egress policy's HTTP proxy; drop --env %s", name, name, name)}
			}
		}
	}
	spec.Env = append(spec.Env, vars...)
	return nil
}

// upstreamResolver resolves through the DNS upstreams the forwarder asks
// (--dns-upstream), so that the proxy sees the same names as the sandbox;
// nil (the system's resolver, which reads /etc/resolv.conf like the
// forwarder) without them.
func upstreamResolver(upstreams []string) *net.Resolver {
	if len(upstreams) == 0 {
		return nil
	}
	var next atomic.Uint32
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, upstreams[int(next.Add(1)-1)%len(upstreams)])
	}}
}

// inPorts reports whether port is in ports (empty: every port).
func inPorts(ports []netpolicy.PortRange, port uint16) bool {
	if len(ports) == 0 {
		return true
	}
	for _, r := range ports {
		if port >= r.First && port <= r.Last {
			return true
		}
	}
	return false
}

// allows reports whether the policy lets the sandbox reach host:port
// directly (for the proxy's tunnels to hosts without method rules).
func allows(p netpolicy.Policy, host string, port uint16) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		for _, r := range p.Allow {
			if r.Prefix.Contains(a.Unmap()) && r.Protocols != netpolicy.UDP && inPorts(r.Ports, port) {
				return true
			}
		}
		return false
	}
	for _, r := range p.HostRules(host) {
		if r.Protocols != netpolicy.UDP && inPorts(r.Ports, port) {
			return true
		}
	}
	return false
}

// allowsInternal reports whether host may lead the proxy to the internal
// (loopback, private, link-local...) address a on port: an address rule
// allows a itself, or a rule for the name keeps private answers
// (allowPrivateAnswers), as the forwarder does for the sandbox.
func allowsInternal(p netpolicy.Policy, host string, a netip.Addr, port uint16) bool {
	if allows(p, a.String(), port) {
		return true
	}
	for _, r := range p.HostRules(host) {
		if r.AllowPrivate && r.Protocols != netpolicy.UDP && inPorts(r.Ports, port) {
			return true
		}
	}
	return false
}

// finish stops the session and the proxy and returns the turn's egress
// log, for the snapshot record.
func (e *egress) finish() (*chunkstore.Egress, error) {
	if e.opts.Policy.Mode == netpolicy.ModeNone {
		return &chunkstore.Egress{Mode: "none"}, nil
	}
	var errs []error
	out := &chunkstore.Egress{Mode: e.opts.Policy.Mode.String()}
	if e.session != nil {
		a, err := e.session.Audit()
		errs = append(errs, err, e.session.Close())
		for _, d := range a.Destinations {
			out.Destinations = append(out.Destinations, chunkstore.EgressDestination{Addr: d.Addr.String(), Port: d.Port,
				Protocol: d.Protocol, Verdict: d.Verdict, Count: d.Count, Names: d.Names})
		}
		for _, q := range a.DNS {
			out.DNS = append(out.DNS, chunkstore.EgressQuery{Name: q.Name, Type: q.Type, Outcome: fmt.Sprint(q.Outcome), Count: q.Count})
		}
		out.Incomplete = a.DenialsDropped+a.DNSDropped+a.DestinationsDropped+a.EventsLost > 0
	}
	if e.proxy != nil {
		for _, x := range e.proxy.Audit() {
			verdict := "allowed"
			if x.Verdict == httpproxy.Denied {
				verdict = "denied"
			}
			proto := "http " + x.Method
			switch {
			case x.Kind == httpproxy.KindTunnel:
				proto = "https (tunnel)"
			case x.Kind == httpproxy.KindIntercepted && x.Method == http.MethodConnect:
				proto = "https CONNECT (intercepted)"
			case x.Kind == httpproxy.KindIntercepted:
				proto = "https " + x.Method
			}
			out.Destinations = append(out.Destinations, chunkstore.EgressDestination{Addr: x.Host, Port: x.Port, Protocol: proto, Verdict: verdict, Count: x.Count})
		}
		errs = append(errs, e.proxy.Close())
		out.HTTPIntercept = e.opts.Policy.HTTPIntercept
		sort.SliceStable(out.Destinations, func(i, j int) bool { return out.Destinations[i].Addr < out.Destinations[j].Addr })
	}
	if e.bpffs != "" {
		unix.Unmount(e.bpffs, unix.MNT_DETACH)
		os.Remove(e.bpffs)
	}
	return out, errors.Join(errs...)
}
