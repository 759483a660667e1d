package httpproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"

	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// upstream is a loopback HTTP or HTTPS server that answers
// "METHOD PATH HOST" and counts requests per method.
type upstream struct {
	srv    *httptest.Server
	port   string
	mu     sync.Mutex
	counts map[string]int
}

func newUpstream(tb testing.TB, useTLS bool) *upstream {
	tb.Helper()
	u := &upstream{counts: make(map[string]int)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.counts[r.Method]++
		u.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, r.Host)
	})
	u.srv = httptest.NewUnstartedServer(h)
	u.srv.Config.ErrorLog = log.New(testWriter{tb}, "upstream: ", 0)
	if useTLS {
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	tb.Cleanup(u.srv.Close)
	_, u.port, _ = net.SplitHostPort(u.srv.Listener.Addr().String())
	return u
}

func (u *upstream) count(method string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.counts[method]
}

// url returns scheme://host:port/path for a name the test dialer maps to
// this server.
func (u *upstream) url(scheme, host, path string) string {
	return scheme + "://" + net.JoinHostPort(host, u.port) + path
}

func (u *upstream) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(u.srv.Certificate())
	return p
}

// loopDialer dials the names in names on 127.0.0.1 only, and records
// every address it was asked for.
type loopDialer struct {
	names  map[string]bool
	mu     sync.Mutex
	dialed []string
}

func newLoopDialer(names ...string) *loopDialer {
	d := &loopDialer{names: make(map[string]bool)}
	for _, n := range names {
		d.names[n] = true
	}
	return d
}

func (d *loopDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	d.mu.Unlock()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !d.names[host] {
		return nil, fmt.Errorf("test dialer: %s is not a test name", host)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
}

func (d *loopDialer) dialedHost(host string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.dialed {
		if h, _, _ := net.SplitHostPort(a); h == host {
			return true
		}
	}
	return false
}

func allowHosts(hosts ...string) func(string, uint16) bool {
	return func(h string, _ uint16) bool {
		for _, a := range hosts {
			if a == h {
				return true
			}
		}
		return false
	}
}

func startProxy(tb testing.TB, cfg Config) *Proxy {
	tb.Helper()
	if cfg.Logf == nil {
		// Servers' internal logs can come after Close: drop those.
		var mu sync.Mutex
		done := false
		tb.Cleanup(func() { mu.Lock(); done = true; mu.Unlock() })
		cfg.Logf = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				tb.Logf(format, args...)
			}
		}
	}
	p, err := Start(cfg, "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return p
}

// proxyClient returns a client that goes through p and trusts roots.
func proxyClient(tb testing.TB, p *Proxy, roots *x509.CertPool) *http.Client {
	tb.Helper()
	u, err := url.Parse(p.URL())
	if err != nil {
		tb.Fatal(err)
	}
	tr := &http.Transport{
		Proxy:             http.ProxyURL(u),
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: true, // offers h2: the proxy must answer http/1.1
	}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// do sends a request and returns the status and body.
func do(tb testing.TB, c *http.Client, method, rawURL string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader("body"))
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: body: %v", method, rawURL, err)
	}
	return resp.StatusCode, string(b)
}

// rawConnect sends CONNECT target to the proxy and returns the response
// and the connection (closed at cleanup).
func rawConnect(tb testing.TB, p *Proxy, target string) (*http.Response, string, net.Conn) {
	tb.Helper()
	c, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		tb.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		tb.Fatalf("CONNECT %s: %v", target, err)
	}
	var body string
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	}
	if br.Buffered() > 0 {
		tb.Fatalf("CONNECT %s: %d unexpected bytes after the response", target, br.Buffered())
	}
	return resp, body, c
}

type auditLine struct {
	Host    string
	Method  string
	Kind    Kind
	Verdict Verdict
	Count   uint64
}

func auditLines(entries []Entry) []auditLine {
	out := make([]auditLine, len(entries))
	for i, e := range entries {
		out[i] = auditLine{e.Host, e.Method, e.Kind, e.Verdict, e.Count}
	}
	return out
}

func checkAudit(tb testing.TB, p *Proxy, want []auditLine) {
	tb.Helper()
	got := auditLines(p.Audit())
	if fmt.Sprint(got) != fmt.Sprint(want) {
		tb.Errorf("audit:\n got %v\nwant %v", got, want)
	}
}

// testWriter sends a server's log to the test's.
type testWriter struct{ tb testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.tb.Logf("%s", strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
