package httpproxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
)

// Proxy is an HTTP(S) forward proxy enforcing one sandbox's policy.
type Proxy struct {
	cfg       Config
	rules     *ruleSet
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	transport *http.Transport
	rp        *httputil.ReverseProxy // forwards allowed requests
	srv       *http.Server           // the listener's connections
	inner     *http.Server           // intercepted connections, after the handshake
	innerLn   *chanListener
	audit     audit

	// Interception (CA configured).
	caCert  *x509.Certificate
	caKey   crypto.Signer
	leafKey *ecdsa.PrivateKey
	leaves  leafCache

	mu      sync.Mutex
	ln      net.Listener
	closed  bool
	hijacks map[net.Conn]struct{} // tunnels and handshakes in progress
	wg      sync.WaitGroup        // handlers running
}

// New checks cfg and returns a Proxy that is not yet serving.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Proxy{
		cfg:     cfg,
		rules:   newRuleSet(cfg.Rules),
		innerLn: newChanListener(),
		hijacks: make(map[net.Conn]struct{}),
		audit:   audit{max: cfg.MaxAuditEntries, entries: make(map[auditKey]*Entry)},
	}
	p.dial = cfg.Dial
	if p.dial == nil {
		p.dial = p.defaultDial
	}
	if cfg.CA != nil {
		cert, _ := parseCA(cfg.CA) // Validate checked it
		p.caCert, p.caKey = cert, cfg.CA.PrivateKey.(crypto.Signer)
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("leaf key: %w", err)
		}
		p.leafKey = key
	}
	p.transport = &http.Transport{
		Proxy:               nil, // never the environment's proxy
		DialContext:         p.dialContext,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: cfg.DialTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     cfg.IdleTimeout,
		DisableCompression:  true,
	}
	errLog := log.New(logWriter(cfg.Logf), "httpproxy: ", 0)
	p.rp = &httputil.ReverseProxy{
		// The request goes to the destination that was decided, normalized,
		// whatever the client wrote; the Host header stays the client's.
		Rewrite: func(pr *httputil.ProxyRequest) {
			f := forwardFrom(pr.In.Context())
			pr.Out.URL.Scheme = f.scheme
			pr.Out.URL.Host = hostPort(f.host, f.port)
			pr.Out.Host = pr.In.Host
		},
		Transport:    p.transport,
		ErrorHandler: p.upstreamError,
		ErrorLog:     errLog,
		BufferPool:   bufferPool{},
	}
	p.srv = &http.Server{
		Handler:           p.handler(p.serveHTTP),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	p.inner = &http.Server{
		Handler:           p.handler(p.serveIntercepted),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          errLog,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ic, ok := c.(*interceptConn); ok {
				return context.WithValue(ctx, targetKey{}, &ic.target)
			}
			return ctx
		},
	}
	return p, nil
}

// Start returns a Proxy for cfg serving on a new TCP listener on addr
// ("127.0.0.1:0" for a random loopback port).
func Start(cfg Config, addr string) (*Proxy, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("HTTP proxy listen on %s: %w", addr, err)
	}
	if err := p.setListener(ln); err != nil {
		ln.Close()
		return nil, err
	}
	go func() {
		if err := p.serve(ln); err != nil {
			p.cfg.Logf("httpproxy: serve %s: %v", ln.Addr(), err)
		}
	}()
	return p, nil
}

// Serve accepts connections on ln until Close, which it returns nil
// after. A Proxy serves one listener, once.
func (p *Proxy) Serve(ln net.Listener) error {
	if err := p.setListener(ln); err != nil {
		return err
	}
	return p.serve(ln)
}

func (p *Proxy) setListener(ln net.Listener) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.ln != nil {
		return fmt.Errorf("already serving on %s: %w", p.ln.Addr(), ErrClosed)
	}
	p.ln = ln
	return nil
}

func (p *Proxy) serve(ln net.Listener) error {
	go func() {
		if err := p.inner.Serve(p.innerLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.cfg.Logf("httpproxy: intercepted connections: %v", err)
		}
	}()
	err := p.srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Addr returns the listener's address, or nil before Serve or Start.
func (p *Proxy) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// URL returns the proxy's URL ("http://127.0.0.1:PORT"), or "" before
// Serve or Start.
func (p *Proxy) URL() string {
	a := p.Addr()
	if a == nil {
		return ""
	}
	return "http://" + a.String()
}

// Env returns the environment variables that point common clients (curl,
// Go, Python, Node, git, pip) at the proxy: HTTP_PROXY, HTTPS_PROXY and
// their lower-case forms. The sandbox must get no NO_PROXY/no_proxy that
// would send hosts with method rules around it (BPF refuses those anyway).
func (p *Proxy) Env() []string {
	u := p.URL()
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u}
}

// Close stops the listener, closes every connection, tunnel and
// intercepted connection, and waits for the requests in progress to end.
// The audit stays readable.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for c := range p.hijacks {
		c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	if ierr := p.inner.Close(); err == nil {
		err = ierr
	}
	p.innerLn.Close()
	p.wg.Wait()
	p.transport.CloseIdleConnections()
	return err
}

// handler wraps h so that Close waits for it: no Logf and no audit
// record after Close returns.
func (p *Proxy) handler(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			http.Error(w, "cairn HTTP proxy: closed", http.StatusServiceUnavailable)
			return
		}
		p.wg.Add(1)
		p.mu.Unlock()
		defer p.wg.Done()
		h(w, r)
	})
}

// track registers a hijacked connection for Close; false if closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.hijacks[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.hijacks, c)
	p.mu.Unlock()
}

// dialContext is the transport's dial: the configured one, with
// DialTimeout for a custom Dial too.
func (p *Proxy) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	return p.dial(ctx, network, addr)
}

// serveHTTP handles one request on the listener: CONNECT or an
// absolute-form http:// request.
func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "cairn HTTP proxy: requests must use an absolute http:// URI (https:// goes through CONNECT)", http.StatusBadRequest)
		return
	}
	host, port, ok := splitTarget(r.URL.Hostname(), r.URL.Port(), 80)
	if !ok {
		http.Error(w, "cairn HTTP proxy: bad host or port in "+strconv.Quote(r.URL.Host), http.StatusBadRequest)
		return
	}
	if err := p.decide(host, port, r.Method); err != nil {
		p.deny(w, KindHTTP, err)
		return
	}
	p.forward(w, r, "http", host, port, KindHTTP)
}

// forward sends r upstream to scheme://host:port and records the outcome.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, scheme, host string, port uint16, kind Kind) {
	f := &forwarding{scheme: scheme, host: host, port: port}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, f)))
	if f.denied != nil {
		p.audit.record(host, port, r.Method, kind, Denied)
		p.cfg.Logf("httpproxy: %s: %v", kind, f.denied)
		return
	}
	p.audit.record(host, port, r.Method, kind, Allowed)
	p.cfg.Logf("httpproxy: %s %s %s: allowed", kind, r.Method, hostPort(host, port))
}

// forwarding is a request's decided destination, and what the
// ReverseProxy's error handler saw, back to forward.
type forwarding struct {
	scheme string
	host   string
	port   uint16
	denied *DeniedError
}

type forwardKey struct{}

func forwardFrom(ctx context.Context) *forwarding {
	f, _ := ctx.Value(forwardKey{}).(*forwarding)
	return f
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	f := forwardFrom(r.Context())
	var de *DeniedError
	if errors.As(err, &de) {
		f.denied = resolvedDenied(f.host, f.port, r.Method, de)
		writeDenied(w, f.denied)
		return
	}
	if errors.Is(err, context.Canceled) {
		w.WriteHeader(http.StatusBadGateway) // the client went away
		return
	}
	p.cfg.Logf("httpproxy: %s %s: %v", r.Method, hostPort(f.host, f.port), err)
	http.Error(w, "cairn HTTP proxy: "+hostPort(f.host, f.port)+": "+err.Error(), http.StatusBadGateway)
}

// resolvedDenied restates a denial of a resolved address (from the dialer)
// for the host and port the client asked for.
func resolvedDenied(host string, port uint16, method string, de *DeniedError) *DeniedError {
	if de.Host == host && de.Port == port {
		return &DeniedError{Host: host, Port: port, Method: method, Reason: de.Reason}
	}
	return &DeniedError{Host: host, Port: port, Method: method, Reason: "it resolved to " + de.Host + ", " + de.Reason}
}

// decide applies the policy to a request (method) or tunnel (CONNECT).
func (p *Proxy) decide(host string, port uint16, method string) error {
	if a, err := parseAddr(host); err == nil && p.isSelf(a, port) {
		return &DeniedError{Host: host, Port: port, Method: method, Reason: "that is the proxy itself"}
	}
	if h := p.rules.match(host); h != nil {
		if !h.allowed(method, port) {
			return &DeniedError{Host: host, Port: port, Method: method, Reason: h.describe()}
		}
		return nil
	}
	if p.cfg.Allowed == nil || !p.cfg.Allowed(host, port) {
		return &DeniedError{Host: host, Port: port, Method: method, Reason: "the host and port are not in the sandbox's egress allowlist"}
	}
	return nil
}

// deny answers 403 for err (a *DeniedError) and records it.
func (p *Proxy) deny(w http.ResponseWriter, kind Kind, err error) {
	de := err.(*DeniedError)
	p.audit.record(de.Host, de.Port, de.Method, kind, Denied)
	p.cfg.Logf("httpproxy: %s: %v", kind, de)
	writeDenied(w, de)
}

func writeDenied(w http.ResponseWriter, de *DeniedError) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Proxy-Status", `cairn; error=http_request_denied; details=`+strconv.Quote(de.Reason))
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "cairn: %v\n", de)
}

// splitTarget normalizes a request's host and port (def when empty).
func splitTarget(host, port string, def uint16) (string, uint16, bool) {
	host = normalizeHost(host)
	if _, err := parseAddr(host); err != nil && !validName(host) {
		return "", 0, false
	}
	if port == "" {
		return host, def, def != 0
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, false
	}
	return host, uint16(n), true
}

// logWriter adapts Logf to the servers' *log.Logger.
type logWriter func(string, ...any)

func (l logWriter) Write(b []byte) (int, error) {
	l("%s", strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// idle reports whether err is a deadline expiring.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bufferPool recycles the ReverseProxy's copy buffers.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
