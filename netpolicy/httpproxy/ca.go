package httpproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

const (
	// CAValidity is how long a CA from NewCA is valid: one sandbox
	// session, not a long-lived trust anchor.
	CAValidity = 7 * 24 * time.Hour
	// LeafValidity is how long a leaf certificate the proxy issues is
	// valid (never past the CA's end).
	LeafValidity = 24 * time.Hour
	// maxLeaves bounds the leaf cache.
	maxLeaves = 1024
	// clockSkew backdates certificates for clocks slightly behind.
	clockSkew = time.Hour
)

// NewCA generates a CA for one sandbox's TLS interception: an ECDSA P-256
// key and a self-signed certificate valid for CAValidity, that can sign
// leaves only (path length 0). With hosts (the rule patterns that will be
// intercepted: names, "*.name" wildcards, IP literals), the certificate
// carries critical name constraints that limit it to those names (and
// their subdomains) and IP addresses, so a leaked key cannot impersonate
// anything else to clients that check constraints (Go, OpenSSL, browsers).
// certPEM goes into the sandbox's trust store; keyPEM (PKCS #8) and cert
// stay with the proxy (Config.CA).
func NewCA(commonName string, hosts ...string) (certPEM, keyPEM []byte, cert tls.Certificate, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, tls.Certificate{}, fmt.Errorf("CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"cairn sandbox"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	if len(hosts) > 0 {
		if err := constrain(tmpl, hosts); err != nil {
			return nil, nil, tls.Certificate{}, err
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, tls.Certificate{}, fmt.Errorf("CA certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, tls.Certificate{}, fmt.Errorf("CA key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, tls.Certificate{}, fmt.Errorf("CA key pair: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(der); err != nil {
			return nil, nil, tls.Certificate{}, fmt.Errorf("CA certificate: %w", err)
		}
	}
	return certPEM, keyPEM, cert, nil
}

// constrain sets name constraints for the host patterns. Without an IP
// literal among them, every IP address is excluded.
func constrain(tmpl *x509.Certificate, hosts []string) error {
	for _, h := range hosts {
		pat, err := normalizePattern(h)
		if err != nil {
			return err
		}
		if a, err := parseAddr(pat); err == nil {
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())})
			continue
		}
		if strings.HasPrefix(pat, "*.") {
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, pat[1:]) // ".name": below name only
		} else {
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, pat) // name and below
		}
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		}
	}
	if len(tmpl.PermittedDNSDomains) == 0 {
		// Only IP literals: no name at all. A permitted subtree that
		// matches no name ("invalid" is reserved, RFC 6761).
		tmpl.PermittedDNSDomains = []string{"invalid"}
	}
	tmpl.PermittedDNSDomainsCritical = true
	return nil
}

func randomSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// leafCache keeps the leaves issued per host.
type leafCache struct {
	mu sync.Mutex
	m  map[string]*tls.Certificate
}

// leaf returns a certificate for host signed by the CA, from the cache
// while it has more than an hour left.
func (p *Proxy) leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	c := &p.leaves
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.m[host]; l != nil && now.Add(clockSkew).Before(l.Leaf.NotAfter) {
		return l, nil
	}
	notAfter := now.Add(LeafValidity)
	if notAfter.After(p.caCert.NotAfter) {
		notAfter = p.caCert.NotAfter
	}
	if !now.Add(clockSkew).Before(notAfter) {
		return nil, fmt.Errorf("the interception CA %q expires at %s: generate a new one", p.caCert.Subject.CommonName, p.caCert.NotAfter.Format(time.RFC3339))
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &p.leafKey.PublicKey, p.caKey)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: p.leafKey, Leaf: parsed}
	if c.m == nil {
		c.m = make(map[string]*tls.Certificate)
	}
	if len(c.m) >= maxLeaves {
		for h, old := range c.m {
			if !now.Add(clockSkew).Before(old.Leaf.NotAfter) {
				delete(c.m, h)
			}
		}
		for h := range c.m { // still full: drop one
			if len(c.m) < maxLeaves {
				break
			}
			delete(c.m, h)
		}
	}
	c.m[host] = l
	return l, nil
}

// systemRootsFiles are the usual places of a Linux distribution's
// bundle of trusted roots, in the order Go's crypto/x509 tries them.
var systemRootsFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// SystemRootsFile returns the PEM file of trusted roots that Go (and
// OpenSSL) read on this host: $SSL_CERT_FILE when it is set, else the
// first of the usual Linux locations that exists. The error says to set
// SSL_CERT_FILE when there is none.
func SystemRootsFile() (string, error) {
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		return f, nil
	}
	for _, f := range systemRootsFiles {
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			return f, nil
		}
	}
	return "", fmt.Errorf("no file of trusted root certificates found (looked at %s); set SSL_CERT_FILE to one",
		strings.Join(systemRootsFiles, ", "))
}

// maxRootsSize bounds the roots file ReadRoots reads (distributions'
// bundles are about 250 KB).
const maxRootsSize = 8 << 20

// ReadRoots reads a PEM file of root certificates (at most 8 MiB) and
// returns its certificates, re-encoded, without anything else the file
// held (comments, keys, trusted-certificate blocks). It fails if the file
// holds no certificate.
func ReadRoots(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("root certificates: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRootsSize+1))
	if err != nil {
		return nil, fmt.Errorf("root certificates: %w", err)
	}
	if len(data) > maxRootsSize {
		return nil, fmt.Errorf("root certificates %s: larger than %d bytes: %w", path, maxRootsSize, ErrInvalid)
	}
	var out []byte
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			continue // as crypto/x509's AppendCertsFromPEM: skip what does not parse
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("root certificates %s: no PEM certificate in it: %w", path, ErrInvalid)
	}
	return out, nil
}

// TrustBundle is the trust store for a sandbox whose TLS the proxy
// intercepts: roots (PEM certificates, such as ReadRoots returns) followed
// by the interception CA's certificate (NewCA's certPEM).
func TrustBundle(roots, caPEM []byte) []byte {
	out := make([]byte, 0, len(roots)+len(caPEM)+1)
	out = append(out, roots...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, caPEM...)
}
