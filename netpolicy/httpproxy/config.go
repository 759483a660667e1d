package httpproxy

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Defaults for the zero values of Config's limits.
const (
	DefaultIdleTimeout       = 5 * time.Minute
	DefaultReadHeaderTimeout = 30 * time.Second
	DefaultDialTimeout       = 30 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxAuditEntries   = 4096
)

// HostRule restricts the HTTP methods a sandbox may use towards a host.
// A host that matches a rule is reached only through the proxy and only as
// the rules for it say; the Allowed hook is not asked about it.
type HostRule struct {
	// Host is an exact name ("api.example.org"), an IP literal, or a
	// wildcard "*.example.org", which matches every name below
	// example.org (a.example.org, a.b.example.org) but not example.org
	// itself. Case and a trailing dot are ignored. Required.
	Host string
	// Methods are the allowed HTTP methods ("GET", "HEAD"), compared in
	// upper case. Empty allows every method.
	Methods []string
	// Ports are the allowed destination ports. Empty allows every port.
	Ports []uint16
}

// Config is the proxy's policy and limits, as plain data. The zero value is
// a valid proxy that denies everything.
type Config struct {
	// Rules are the hosts with HTTP method rules. When several rules match a
	// host, the most specific pattern decides (an exact name, then the
	// longest wildcard suffix); the rules with that same pattern add up.
	// A host that matches a pattern but none of its rules' ports is denied.
	Rules []HostRule

	// Allowed says whether a host without method rules may be reached on
	// a port: such hosts pass as blind CONNECT tunnels or plain forwarded
	// requests, without method checks. The default dialer also asks it
	// about every loopback, private, link-local, CGNAT, multicast or
	// unspecified address a name resolves to, with the address as host
	// (so "127.0.0.1" must be allowed to reach the host's loopback). Nil
	// allows nothing beyond Rules. It must be safe for concurrent use.
	Allowed func(host string, port uint16) bool

	// AllowInternal says whether host (a name or IP literal the policy
	// allowed, as the client asked for it) may lead to addr on port, where
	// addr is a loopback, private, link-local, CGNAT, multicast or
	// unspecified address that host resolved to (a name's rule may allow
	// private answers). The default dialer asks it before connecting to
	// such an address. Nil: Allowed(addr.String(), port) decides, so only
	// a rule for the address itself allows it. It must be safe for
	// concurrent use.
	AllowInternal func(host string, addr netip.Addr, port uint16) bool

	// Dial connects to a destination the policy allowed, by name
	// ("api.example.org:443"). Default: a net.Dialer with DialTimeout whose
	// Control refuses the addresses described under Allowed. A custom Dial
	// takes over that check.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// Resolver resolves names for the default dialer. Default:
	// net.DefaultResolver. Ignored with a custom Dial.
	Resolver *net.Resolver

	// CA enables TLS interception for CONNECT to hosts with method rules:
	// the proxy terminates TLS with a leaf certificate for the host signed
	// by this CA, enforces the methods, and forwards over a new TLS
	// connection. Its Certificate[0] must be a CA certificate and its
	// PrivateKey a crypto.Signer (NewCA makes one). Default nil: CONNECT to
	// a host with method rules is denied, since methods cannot be seen
	// inside TLS.
	CA *tls.Certificate

	// RootCAs verify the real hosts' certificates when intercepting.
	// Default nil: the system roots.
	RootCAs *x509.CertPool

	// IdleTimeout closes a client connection with no request for this
	// long, and a tunnel or intercepted connection with no byte in either
	// direction for this long. Default DefaultIdleTimeout (5 minutes).
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers, and the TLS
	// handshake of an intercepted connection. Default
	// DefaultReadHeaderTimeout (30 seconds).
	ReadHeaderTimeout time.Duration
	// DialTimeout bounds connecting to a destination (default dialer
	// only). Default DefaultDialTimeout (30 seconds).
	DialTimeout time.Duration
	// MaxHeaderBytes bounds a request's header size, in bytes. Default
	// DefaultMaxHeaderBytes (64 KiB).
	MaxHeaderBytes int
	// MaxAuditEntries bounds the distinct audit entries kept; further ones
	// are counted by AuditDropped. Default DefaultMaxAuditEntries (4096).
	MaxAuditEntries int

	// Logf receives one line per decision and per failure. Default: none.
	Logf func(format string, args ...any)
}

// Validate reports the first problem with the configuration, wrapping
// ErrInvalid.
func (c *Config) Validate() error {
	for i, r := range c.Rules {
		if _, err := normalizePattern(r.Host); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
		for _, m := range r.Methods {
			if !isToken(m) {
				return fmt.Errorf("rule %d (%s): method %q is not an HTTP method: %w", i, r.Host, m, ErrInvalid)
			}
			if strings.EqualFold(m, "CONNECT") {
				return fmt.Errorf("rule %d (%s): CONNECT is how the proxy is reached, not a method a rule can allow: %w", i, r.Host, ErrInvalid)
			}
		}
		for _, p := range r.Ports {
			if p == 0 {
				return fmt.Errorf("rule %d (%s): port 0: %w", i, r.Host, ErrInvalid)
			}
		}
	}
	if c.CA != nil {
		if _, err := parseCA(c.CA); err != nil {
			return err
		}
	}
	for name, d := range map[string]time.Duration{"IdleTimeout": c.IdleTimeout, "ReadHeaderTimeout": c.ReadHeaderTimeout, "DialTimeout": c.DialTimeout} {
		if d < 0 {
			return fmt.Errorf("%s %v is negative: %w", name, d, ErrInvalid)
		}
	}
	if c.MaxHeaderBytes < 0 || c.MaxAuditEntries < 0 {
		return fmt.Errorf("MaxHeaderBytes %d, MaxAuditEntries %d: negative: %w", c.MaxHeaderBytes, c.MaxAuditEntries, ErrInvalid)
	}
	return nil
}

// withDefaults returns c with the zero limits replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxAuditEntries == 0 {
		c.MaxAuditEntries = DefaultMaxAuditEntries
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// parseCA checks that ca can sign leaves and returns its certificate.
func parseCA(ca *tls.Certificate) (*x509.Certificate, error) {
	if len(ca.Certificate) == 0 {
		return nil, fmt.Errorf("CA has no certificate: %w", ErrInvalid)
	}
	cert := ca.Leaf
	if cert == nil {
		var err error
		if cert, err = x509.ParseCertificate(ca.Certificate[0]); err != nil {
			return nil, fmt.Errorf("CA certificate: %v: %w", err, ErrInvalid)
		}
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("CA certificate %q is not a CA (basic constraints or key usage): %w", cert.Subject.CommonName, ErrInvalid)
	}
	if _, ok := ca.PrivateKey.(crypto.Signer); !ok {
		return nil, fmt.Errorf("CA private key %T cannot sign: %w", ca.PrivateKey, ErrInvalid)
	}
	return cert, nil
}

// normalizeHost lower-cases host and drops a trailing dot and IPv6
// brackets; IP literals are returned in their canonical form.
func normalizeHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("").String()
	}
	return host
}

// normalizePattern checks and normalizes a rule's Host.
func normalizePattern(p string) (string, error) {
	n := normalizeHost(p)
	name := strings.TrimPrefix(n, "*.")
	if _, err := netip.ParseAddr(n); err == nil {
		return n, nil
	}
	if name == "" || strings.Contains(name, "*") || !validName(name) {
		return "", fmt.Errorf("host pattern %q: want a name, an IP literal or *.name: %w", p, ErrInvalid)
	}
	return n, nil
}

// validName reports whether s is a DNS name of letters, digits, '-' and
// '_' in dot-separated labels of 1 to 63 characters.
func validName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token, as methods are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// parseAddr parses an IP literal without a zone.
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("not an IP literal: %q", s)
	}
	return a.Unmap(), nil
}
