package httpproxy

import (
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestProxy_PlainHTTP(t *testing.T) {
	up := newUpstream(t, false)
	d := newLoopDialer("api.example.com", "open.example.com")
	p := startProxy(t, Config{
		Rules:   []HostRule{{Host: "api.example.com", Methods: []string{"GET", "head"}}},
		Allowed: allowHosts("open.example.com"),
		Dial:    d.Dial,
	})
	c := proxyClient(t, p, nil)

	t.Run("GetAllowed", func(t *testing.T) {
		code, body := do(t, c, "GET", up.url("http", "api.example.com", "/x"))
		if code != 200 || body != "GET /x api.example.com:"+up.port {
			t.Fatalf("GET: %d %q", code, body)
		}
		if code, _ := do(t, c, "HEAD", up.url("http", "API.example.com.", "/x")); code != 200 {
			t.Fatalf("HEAD: %d", code)
		}
	})
	t.Run("PostDenied", func(t *testing.T) {
		code, body := do(t, c, "POST", up.url("http", "api.example.com", "/x"))
		if code != http.StatusForbidden {
			t.Fatalf("POST: %d %q, want 403", code, body)
		}
		if !strings.Contains(body, `POST to api.example.com:`+up.port) || !strings.Contains(body, `rule "api.example.com" allows GET, HEAD on any port`) {
			t.Errorf("403 body does not name the rule: %q", body)
		}
		if n := up.count("POST"); n != 0 {
			t.Errorf("upstream saw %d POSTs", n)
		}
	})
	t.Run("AllowedHostWithoutRules", func(t *testing.T) {
		if code, body := do(t, c, "POST", up.url("http", "open.example.com", "/y")); code != 200 || body != "POST /y open.example.com:"+up.port {
			t.Fatalf("POST to an allowed host: %d %q", code, body)
		}
	})
	t.Run("OtherHostDenied", func(t *testing.T) {
		code, body := do(t, c, "GET", up.url("http", "denied.example.com", "/"))
		if code != http.StatusForbidden || !strings.Contains(body, "not in the sandbox's egress allowlist") {
			t.Fatalf("GET denied host: %d %q", code, body)
		}
		if d.dialedHost("denied.example.com") {
			t.Error("the proxy dialed a denied host")
		}
	})
	t.Run("OriginForm", func(t *testing.T) {
		resp, err := http.Get(p.URL() + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("origin-form request: %d, want 400", resp.StatusCode)
		}
	})
	checkAudit(t, p, []auditLine{
		{"api.example.com", "GET", KindHTTP, Allowed, 1},
		{"api.example.com", "HEAD", KindHTTP, Allowed, 1},
		{"api.example.com", "POST", KindHTTP, Denied, 1},
		{"denied.example.com", "GET", KindHTTP, Denied, 1},
		{"open.example.com", "POST", KindHTTP, Allowed, 1},
	})
}

func TestProxy_RulePorts(t *testing.T) {
	up := newUpstream(t, false)
	d := newLoopDialer("api.example.com")
	p := startProxy(t, Config{
		Rules:   []HostRule{{Host: "*.example.com", Methods: []string{"GET"}, Ports: []uint16{1}}},
		Allowed: func(string, uint16) bool { return true }, // never asked for ruled hosts
		Dial:    d.Dial,
	})
	c := proxyClient(t, p, nil)
	code, body := do(t, c, "GET", up.url("http", "api.example.com", "/"))
	if code != http.StatusForbidden || !strings.Contains(body, `rule "*.example.com" allows GET on port 1`) {
		t.Fatalf("GET on a port no rule lists: %d %q", code, body)
	}
	if d.dialedHost("api.example.com") {
		t.Error("dialed a denied destination")
	}
}

func TestProxy_ConnectTunnel(t *testing.T) {
	up := newUpstream(t, true)
	d := newLoopDialer("open.example.com")
	p := startProxy(t, Config{Allowed: allowHosts("open.example.com"), Dial: d.Dial})
	c := proxyClient(t, p, up.pool())
	for _, m := range []string{"GET", "POST"} {
		code, body := do(t, c, m, up.url("https", "open.example.com", "/t"))
		if code != 200 || body != m+" /t open.example.com:"+up.port {
			t.Fatalf("%s through a tunnel: %d %q", m, code, body)
		}
	}
	checkAudit(t, p, []auditLine{{"open.example.com", "CONNECT", KindTunnel, Allowed, 1}})
}

func TestProxy_ConnectDenied(t *testing.T) {
	up := newUpstream(t, true)
	d := newLoopDialer("open.example.com", "denied.example.com")
	p := startProxy(t, Config{Allowed: allowHosts("open.example.com"), Dial: d.Dial})
	c := proxyClient(t, p, up.pool())
	_, err := c.Get(up.url("https", "denied.example.com", "/"))
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("GET through CONNECT to a denied host: %v, want Forbidden", err)
	}
	resp, body, _ := rawConnect(t, p, "denied.example.com:"+up.port)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CONNECT to denied.example.com:"+up.port+" denied") {
		t.Fatalf("raw CONNECT: %d %q", resp.StatusCode, body)
	}
	if d.dialedHost("denied.example.com") {
		t.Error("the proxy dialed a denied host")
	}
	checkAudit(t, p, []auditLine{{"denied.example.com", "CONNECT", KindTunnel, Denied, 2}})
}

func TestProxy_ConnectRuledHostWithoutCA(t *testing.T) {
	up := newUpstream(t, true)
	d := newLoopDialer("api.example.com")
	p := startProxy(t, Config{
		Rules:   []HostRule{{Host: "api.example.com", Methods: []string{"GET"}}},
		Allowed: func(string, uint16) bool { return true },
		Dial:    d.Dial,
	})
	resp, body, _ := rawConnect(t, p, "api.example.com:"+up.port)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT to a host with method rules and no CA: %d, want 403", resp.StatusCode)
	}
	if !strings.Contains(body, "cannot be enforced inside TLS without interception") || !strings.Contains(body, `rule "api.example.com" allows GET`) {
		t.Errorf("403 body does not explain: %q", body)
	}
	if d.dialedHost("api.example.com") {
		t.Error("the proxy dialed the host")
	}
	checkAudit(t, p, []auditLine{{"api.example.com", "CONNECT", KindTunnel, Denied, 1}})
}

func TestProxy_Intercept(t *testing.T) {
	up := newUpstream(t, true)
	d := newLoopDialer("api.example.com", "open.example.com")
	caPEM, _, ca, err := NewCA("cairn test sandbox", "*.example.com")
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{
		Rules:   []HostRule{{Host: "api.example.com", Methods: []string{"GET", "HEAD"}}},
		Allowed: allowHosts("open.example.com"),
		Dial:    d.Dial,
		CA:      &ca,
		RootCAs: up.pool(),
	})
	roots := up.pool() // for the blind tunnel to open.example.com
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM not parsed")
	}
	c := proxyClient(t, p, roots)

	t.Run("GetAllowed", func(t *testing.T) {
		resp, err := c.Get(up.url("https", "api.example.com", "/in"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "GET /in api.example.com:"+up.port {
			t.Fatalf("GET: %d %q", resp.StatusCode, b)
		}
		if resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" || resp.Proto != "HTTP/1.1" {
			t.Errorf("protocol %s, ALPN %q: want HTTP/1.1 only", resp.Proto, resp.TLS.NegotiatedProtocol)
		}
		leaf := resp.TLS.PeerCertificates[0]
		if leaf.Issuer.CommonName != "cairn test sandbox" || leaf.DNSNames[0] != "api.example.com" {
			t.Errorf("leaf issued by %q for %v: want the sandbox CA, api.example.com", leaf.Issuer.CommonName, leaf.DNSNames)
		}
	})
	t.Run("PostDenied", func(t *testing.T) {
		code, body := do(t, c, "POST", up.url("https", "api.example.com", "/in"))
		if code != http.StatusForbidden || !strings.Contains(body, `rule "api.example.com" allows GET, HEAD`) {
			t.Fatalf("POST inside TLS: %d %q", code, body)
		}
		if n := up.count("POST"); n != 0 {
			t.Errorf("upstream saw %d POSTs", n)
		}
	})
	t.Run("HostMismatch", func(t *testing.T) {
		req, _ := http.NewRequest("GET", up.url("https", "api.example.com", "/in"), nil)
		req.Host = "open.example.com"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "but the connection was opened to") {
			t.Fatalf("Host header naming another host: %d %q", resp.StatusCode, b)
		}
	})
	t.Run("HostWithoutRulesIsTunneled", func(t *testing.T) {
		resp, err := c.Post(up.url("https", "open.example.com", "/o"), "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].Issuer.CommonName == "cairn test sandbox" {
			t.Fatalf("open.example.com: %d, issuer %q: want the real server's certificate", resp.StatusCode, resp.TLS.PeerCertificates[0].Issuer.CommonName)
		}
	})
	checkAudit(t, p, []auditLine{
		{"api.example.com", "CONNECT", KindIntercepted, Allowed, 1},
		{"api.example.com", "GET", KindIntercepted, Allowed, 1},
		{"api.example.com", "GET", KindIntercepted, Denied, 1},
		{"api.example.com", "POST", KindIntercepted, Denied, 1},
		{"open.example.com", "CONNECT", KindTunnel, Allowed, 1},
	})
}

func TestProxy_InterceptVerifiesUpstream(t *testing.T) {
	up := newUpstream(t, true)
	d := newLoopDialer("api.example.com")
	caPEM, _, ca, err := NewCA("cairn test sandbox")
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{
		Rules: []HostRule{{Host: "api.example.com", Methods: []string{"GET"}}},
		Dial:  d.Dial,
		CA:    &ca,
		// RootCAs nil: the system roots, which do not know httptest's CA.
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	code, body := do(t, proxyClient(t, p, roots), "GET", up.url("https", "api.example.com", "/"))
	if code != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Fatalf("upstream with an untrusted certificate: %d %q, want 502", code, body)
	}
	if up.count("GET") != 0 {
		t.Error("the request reached an unverified upstream")
	}
}

func TestProxy_DefaultDialerRefusesInternalAddresses(t *testing.T) {
	up := newUpstream(t, false)
	p := startProxy(t, Config{Allowed: allowHosts("localhost", "127.0.0.1")})
	c := proxyClient(t, p, nil)
	if code, body := do(t, c, "GET", up.url("http", "127.0.0.1", "/")); code != 200 {
		t.Fatalf("GET to an allowed loopback address: %d %q", code, body)
	}

	p2 := startProxy(t, Config{Allowed: allowHosts("localhost")})
	c2 := proxyClient(t, p2, nil)
	code, body := do(t, c2, "GET", up.url("http", "localhost", "/"))
	if code != http.StatusForbidden || !strings.Contains(body, "resolved to 127.0.0.1, a loopback") {
		t.Fatalf("GET to a name that resolves to loopback: %d %q, want 403", code, body)
	}
	resp, body, _ := rawConnect(t, p2, "localhost:"+up.port)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "resolved to 127.0.0.1, a loopback") {
		t.Fatalf("CONNECT to a name that resolves to loopback: %d %q", resp.StatusCode, body)
	}
	if up.count("GET") != 1 {
		t.Errorf("upstream saw %d GETs, want 1", up.count("GET"))
	}
	checkAudit(t, p2, []auditLine{
		{"localhost", "GET", KindHTTP, Denied, 1},
		{"localhost", "CONNECT", KindTunnel, Denied, 1},
	})
}

func TestProxy_RefusesItself(t *testing.T) {
	p := startProxy(t, Config{Allowed: func(string, uint16) bool { return true }})
	_, port, _ := net.SplitHostPort(p.Addr().String())
	c := proxyClient(t, p, nil)
	code, body := do(t, c, "GET", "http://127.0.0.1:"+port+"/")
	if code != http.StatusForbidden || !strings.Contains(body, "the proxy itself") {
		t.Fatalf("GET to the proxy through itself: %d %q", code, body)
	}
	resp, body, _ := rawConnect(t, p, "127.0.0.1:"+port)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT to the proxy itself: %d %q", resp.StatusCode, body)
	}
}

func TestProxy_HeaderLimit(t *testing.T) {
	up := newUpstream(t, false)
	d := newLoopDialer("open.example.com")
	p := startProxy(t, Config{Allowed: allowHosts("open.example.com"), Dial: d.Dial, MaxHeaderBytes: 1 << 10})
	req, _ := http.NewRequest("GET", up.url("http", "open.example.com", "/"), nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := proxyClient(t, p, nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("64 KiB header: %d, want 431", resp.StatusCode)
	}
}

func TestProxy_IdleTunnelClosed(t *testing.T) {
	up := newUpstream(t, false)
	d := newLoopDialer("open.example.com")
	p := startProxy(t, Config{Allowed: allowHosts("open.example.com"), Dial: d.Dial, IdleTimeout: 50 * time.Millisecond})
	resp, _, c := rawConnect(t, p, "open.example.com:"+up.port)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	// No deadline here: the proxy must close the idle tunnel.
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read on an idle tunnel: %d, %v; want EOF", n, err)
	}
}

func TestProxy_CloseEndsTunnels(t *testing.T) {
	up := newUpstream(t, false)
	d := newLoopDialer("open.example.com")
	p, err := Start(Config{Allowed: allowHosts("open.example.com"), Dial: d.Dial, Logf: t.Logf}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, _, c := rawConnect(t, p, "open.example.com:"+up.port)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("tunnel still open after Close")
	}
	if err := p.Serve(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Serve after Close: %v, want ErrClosed", err)
	}
}

func TestProxy_Env(t *testing.T) {
	p := startProxy(t, Config{})
	env := p.Env()
	if len(env) != 4 || env[1] != "HTTPS_PROXY=http://"+p.Addr().String() {
		t.Fatalf("Env: %v", env)
	}
}

func TestProxy_CloseDuringRequest(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	up := newUpstream(t, false)
	up.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	t.Cleanup(func() { close(release) }) // runs before up.srv.Close
	d := newLoopDialer("open.example.com")
	p, err := Start(Config{Allowed: allowHosts("open.example.com"), Dial: d.Dial, Logf: t.Logf}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := proxyClient(t, p, nil)
	done := make(chan error, 1)
	go func() {
		resp, err := c.Get(up.url("http", "open.example.com", "/"))
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-entered
	if err := p.Close(); err != nil { // must not wait for the upstream
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("request succeeded through a closed proxy")
	}
}

// TestProxy_AllowInternal: a name whose rule allows private answers may
// lead to loopback through AllowInternal, which is asked with the name;
// another name resolving to the same address is still refused.
func TestProxy_AllowInternal(t *testing.T) {
	up := newUpstream(t, false)
	var asked []string
	var mu sync.Mutex
	p := startProxy(t, Config{
		Allowed: allowHosts("localhost", "127.0.0.1"),
		AllowInternal: func(host string, a netip.Addr, port uint16) bool {
			mu.Lock()
			asked = append(asked, host+" "+a.String())
			mu.Unlock()
			return host == "localhost" && a.IsLoopback()
		},
	})
	c := proxyClient(t, p, nil)
	if code, body := do(t, c, "GET", up.url("http", "LocalHost.", "/")); code != 200 {
		t.Fatalf("GET to a name allowed to lead to loopback: %d %q", code, body)
	}
	code, body := do(t, c, "GET", up.url("http", "127.0.0.1", "/"))
	if code != http.StatusForbidden || !strings.Contains(body, "internal address") {
		t.Fatalf("GET to the literal (Allowed, but not AllowInternal): %d %q, want 403", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(asked, "localhost 127.0.0.1") || asked[len(asked)-1] != "127.0.0.1 127.0.0.1" {
		t.Errorf("AllowInternal asked %q", asked)
	}
}
