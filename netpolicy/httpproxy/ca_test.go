package httpproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"
)

// signLeaf makes a leaf for names and ips signed by ca.
func signLeaf(t *testing.T, ca tls.Certificate, names []string, ips []net.IP) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "leaf"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewCA(t *testing.T) {
	certPEM, keyPEM, ca, err := NewCA("sandbox 1", "*.example.com", "api.example.org")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("PEM pair: %v", err)
	}
	c := ca.Leaf
	if !c.IsCA || !c.MaxPathLenZero || c.NotAfter.Sub(c.NotBefore) > CAValidity+clockSkew {
		t.Errorf("CA: IsCA %v, MaxPathLenZero %v, validity %v", c.IsCA, c.MaxPathLenZero, c.NotAfter.Sub(c.NotBefore))
	}
	if _, ok := ca.PrivateKey.(*ecdsa.PrivateKey); !ok || c.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key %T, want ECDSA", ca.PrivateKey)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	for _, tc := range []struct {
		names []string
		ips   []net.IP
		ok    bool
	}{
		{[]string{"api.example.com"}, nil, true},
		{[]string{"a.b.example.com"}, nil, true},
		{[]string{"api.example.org"}, nil, true},
		{[]string{"example.com"}, nil, false}, // *.example.com: below only
		{[]string{"bank.example"}, nil, false},
		{nil, []net.IP{net.IPv4(127, 0, 0, 1)}, false},
	} {
		leaf := signLeaf(t, ca, tc.names, tc.ips)
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots})
		if (err == nil) != tc.ok {
			t.Errorf("leaf for %v %v: Verify = %v, want ok %v", tc.names, tc.ips, err, tc.ok)
		}
		var inv x509.CertificateInvalidError
		if err != nil && (!errors.As(err, &inv) || inv.Reason != x509.CANotAuthorizedForThisName) {
			t.Errorf("leaf for %v %v: %v, want CANotAuthorizedForThisName", tc.names, tc.ips, err)
		}
	}
	if _, _, _, err := NewCA("x", "a.*.b"); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewCA with a bad pattern: %v, want ErrInvalid", err)
	}
}

func TestProxy_LeafCache(t *testing.T) {
	_, _, ca, err := NewCA("sandbox")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{CA: &ca})
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.leaf("api.example.com")
	c, _ := p.leaf("2001:db8::1")
	if a != b || a == c {
		t.Error("leaves not cached per host")
	}
	if len(c.Leaf.IPAddresses) != 1 || len(c.Leaf.DNSNames) != 0 {
		t.Errorf("leaf for an IP literal: %v %v", c.Leaf.DNSNames, c.Leaf.IPAddresses)
	}
	if !c.Leaf.NotAfter.After(time.Now()) || c.Leaf.NotAfter.After(ca.Leaf.NotAfter) {
		t.Errorf("leaf validity ends %v, CA %v", c.Leaf.NotAfter, ca.Leaf.NotAfter)
	}
	if _, err := New(Config{CA: &tls.Certificate{Certificate: a.Certificate, PrivateKey: a.PrivateKey}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a leaf as CA: %v, want ErrInvalid", err)
	}
}
