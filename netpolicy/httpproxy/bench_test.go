package httpproxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
)

// BenchmarkProxiedGET measures one GET with keep-alive on loopback:
// direct, through the proxy as plain HTTP, through a blind CONNECT tunnel
// (HTTPS), and intercepted (HTTPS terminated and re-encrypted).
func BenchmarkProxiedGET(b *testing.B) {
	plain := newUpstream(b, false)
	secure := newUpstream(b, true)
	d := newLoopDialer("api.example.com", "open.example.com")
	caPEM, _, ca, err := NewCA("bench")
	if err != nil {
		b.Fatal(err)
	}
	p := startProxy(b, Config{
		Rules:   []HostRule{{Host: "api.example.com", Methods: []string{"GET"}}},
		Allowed: allowHosts("open.example.com"),
		Dial:    d.Dial,
		CA:      &ca,
		RootCAs: secure.pool(),
		Logf:    func(string, ...any) {},
	})
	roots := secure.pool()
	roots.AppendCertsFromPEM(caPEM)
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	proxied := proxyClient(b, p, roots)
	run := func(b *testing.B, c *http.Client, url string) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	b.Run("Direct", func(b *testing.B) { run(b, direct, plain.srv.URL+"/") })
	b.Run("PlainHTTP", func(b *testing.B) { run(b, proxied, plain.url("http", "api.example.com", "/")) })
	b.Run("Tunnel", func(b *testing.B) { run(b, proxied, secure.url("https", "open.example.com", "/")) })
	b.Run("Intercepted", func(b *testing.B) { run(b, proxied, secure.url("https", "api.example.com", "/")) })
}
