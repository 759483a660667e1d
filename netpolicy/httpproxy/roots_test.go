package httpproxy

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSystemRootsFile(t *testing.T) {
	t.Run("Env", func(t *testing.T) {
		t.Setenv("SSL_CERT_FILE", "/some/roots.pem")
		if f, err := SystemRootsFile(); err != nil || f != "/some/roots.pem" {
			t.Fatalf("SystemRootsFile = %q, %v; want $SSL_CERT_FILE", f, err)
		}
	})
	t.Run("Host", func(t *testing.T) {
		t.Setenv("SSL_CERT_FILE", "")
		f, err := SystemRootsFile()
		if err != nil {
			t.Skipf("this host has no roots file: %v", err)
		}
		if _, err := ReadRoots(f); err != nil {
			t.Fatalf("the host's roots file %s: %v", f, err)
		}
	})
}

func TestReadRoots(t *testing.T) {
	caPEM, keyPEM, _, err := NewCA("roots test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, parts ...[]byte) string {
		p := filepath.Join(dir, name)
		var data []byte
		for _, b := range parts {
			data = append(data, b...)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A bundle with a comment, a key and a broken certificate around the
	// real one: only the certificate is kept.
	broken := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
	got, err := ReadRoots(write("mixed.pem", []byte("# Comment\n"), keyPEM, broken, caPEM, []byte("trailing text\n")))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(caPEM) {
		t.Errorf("ReadRoots kept\n%s\nwant only\n%s", got, caPEM)
	}
	for name, data := range map[string][]byte{"empty.pem": nil, "key.pem": keyPEM, "text.pem": []byte("hello\n")} {
		if _, err := ReadRoots(write(name, data)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := ReadRoots(filepath.Join(dir, "missing.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}

	bundle := TrustBundle([]byte(strings.TrimSuffix(string(got), "\n")), caPEM)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) || !strings.Contains(string(bundle), "-----\n-----BEGIN") {
		t.Errorf("TrustBundle does not separate its parts:\n%s", bundle)
	}
}
