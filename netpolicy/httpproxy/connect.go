package httpproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// connect handles CONNECT host:port: a blind tunnel for hosts without
// method rules that Allowed allows, interception for hosts with method
// rules when a CA is configured, 403 otherwise.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	authority := r.URL.Host
	if authority == "" {
		authority = r.Host
	}
	h, ps, err := net.SplitHostPort(authority)
	host, port, ok := splitTarget(h, ps, 0)
	if err != nil || !ok {
		http.Error(w, "cairn HTTP proxy: CONNECT needs host:port, got "+authority, http.StatusBadRequest)
		return
	}
	if a, err := parseAddr(host); err == nil && p.isSelf(a, port) {
		p.deny(w, KindTunnel, &DeniedError{Host: host, Port: port, Method: http.MethodConnect, Reason: "that is the proxy itself"})
		return
	}
	hr := p.rules.match(host)
	if hr == nil {
		if err := p.decide(host, port, http.MethodConnect); err != nil {
			p.deny(w, KindTunnel, err)
			return
		}
		p.tunnel(w, host, port)
		return
	}
	if !hr.portAllowed(port) {
		kind := KindTunnel
		if p.caKey != nil {
			kind = KindIntercepted
		}
		p.deny(w, kind, &DeniedError{Host: host, Port: port, Method: http.MethodConnect, Reason: hr.describe()})
		return
	}
	if p.caKey == nil {
		p.deny(w, KindTunnel, &DeniedError{Host: host, Port: port, Method: http.MethodConnect,
			Reason: hr.describe() + "; HTTP methods cannot be enforced inside TLS without interception, " +
				"and this sandbox has no interception CA: use http:// for this host, or turn on interception with a sandbox CA (cairn run --http-intercept)"})
		return
	}
	p.intercept(w, hr, host, port)
}

// hijack takes the client connection over from the server, registered for
// Close. The returned conn reads what the server had buffered first.
func (p *Proxy) hijack(w http.ResponseWriter) (net.Conn, error) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, errors.New("connection cannot be hijacked")
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return nil, err
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		c.Close()
		return nil, err
	}
	if !p.track(c) {
		c.Close()
		return nil, ErrClosed
	}
	if brw.Reader.Buffered() == 0 {
		return c, nil
	}
	return &bufConn{Conn: c, r: brw.Reader}, nil
}

// release closes and unregisters a hijacked connection.
func (p *Proxy) release(c net.Conn) {
	c.Close()
	if bc, ok := c.(*bufConn); ok {
		c = bc.Conn
	}
	p.untrack(c)
}

const connectOK = "HTTP/1.1 200 Connection established\r\n\r\n"

// tunnel dials host:port and relays bytes both ways until both sides end,
// or nothing moves for IdleTimeout.
func (p *Proxy) tunnel(w http.ResponseWriter, host string, port uint16) {
	up, err := p.dialContext(context.Background(), "tcp", hostPort(host, port))
	if err != nil {
		var de *DeniedError
		if errors.As(err, &de) {
			p.deny(w, KindTunnel, resolvedDenied(host, port, http.MethodConnect, de))
			return
		}
		p.audit.record(host, port, http.MethodConnect, KindTunnel, Allowed)
		p.cfg.Logf("httpproxy: tunnel %s: %v", hostPort(host, port), err)
		http.Error(w, "cairn HTTP proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	c, err := p.hijack(w)
	if err != nil {
		p.cfg.Logf("httpproxy: tunnel %s: %v", hostPort(host, port), err)
		return
	}
	defer p.release(c)
	p.audit.record(host, port, http.MethodConnect, KindTunnel, Allowed)
	p.cfg.Logf("httpproxy: tunnel CONNECT %s: allowed", hostPort(host, port))
	if _, err := io.WriteString(c, connectOK); err != nil {
		return
	}
	relay(c, up, p.cfg.IdleTimeout)
}

// relay copies a to b and b to a. When one side ends its stream the other
// gets a half close; relay returns when both directions are done, or
// either fails, or nothing moved for idle.
func relay(a, b net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	var once sync.Once
	abort := func() { once.Do(func() { a.Close(); b.Close() }) }
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			if err := src.SetReadDeadline(time.Now().Add(idle)); err != nil {
				abort()
				return
			}
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				if dst.SetWriteDeadline(time.Now().Add(idle)) != nil {
					abort()
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					abort()
					return
				}
			}
			if err == nil {
				continue
			}
			if isTimeout(err) && time.Since(time.Unix(0, last.Load())) < idle {
				continue // the other direction is busy
			}
			if errors.Is(err, io.EOF) && closeWrite(dst) == nil {
				return
			}
			abort()
			return
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

func closeWrite(c net.Conn) error {
	if bc, ok := c.(*bufConn); ok {
		c = bc.Conn
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// bufConn is a hijacked connection whose first bytes the server had
// already read into r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// target is an intercepted connection's destination.
type target struct {
	host  string
	port  uint16
	rules *hostRules
}

type targetKey struct{}

func targetFrom(ctx context.Context) *target {
	t, _ := ctx.Value(targetKey{}).(*target)
	return t
}

// interceptConn is a client's TLS connection after the handshake, with
// the CONNECT target, as the inner server accepts it.
type interceptConn struct {
	*tls.Conn
	target target
}

// intercept answers the CONNECT, terminates the client's TLS with a leaf
// for host and hands the connection to the inner server, which reads its
// requests (serveIntercepted).
func (p *Proxy) intercept(w http.ResponseWriter, hr *hostRules, host string, port uint16) {
	leaf, err := p.leaf(host)
	if err != nil {
		p.cfg.Logf("httpproxy: leaf certificate for %s: %v", host, err)
		http.Error(w, "cairn HTTP proxy: cannot issue a certificate for "+host+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	c, err := p.hijack(w)
	if err != nil {
		p.cfg.Logf("httpproxy: intercept %s: %v", hostPort(host, port), err)
		return
	}
	p.audit.record(host, port, http.MethodConnect, KindIntercepted, Allowed)
	p.cfg.Logf("httpproxy: intercepted CONNECT %s: allowed, methods checked inside", hostPort(host, port))
	tc := tls.Server(c, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"}, // never h2: the inner server reads HTTP/1.1
		MinVersion:   tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ReadHeaderTimeout)
	_, werr := io.WriteString(c, connectOK)
	if werr == nil {
		werr = tc.HandshakeContext(ctx)
	}
	cancel()
	if werr != nil {
		p.cfg.Logf("httpproxy: intercept %s: TLS handshake: %v", hostPort(host, port), werr)
		p.release(c)
		return
	}
	// The inner server owns the connection from here; Close closes it
	// through the server.
	ic := &interceptConn{Conn: tc, target: target{host: host, port: port, rules: hr}}
	p.untrack(unbuf(c))
	if !p.innerLn.push(ic) {
		tc.Close()
	}
}

func unbuf(c net.Conn) net.Conn {
	if bc, ok := c.(*bufConn); ok {
		return bc.Conn
	}
	return c
}

// serveIntercepted enforces the method rules on one request read inside an
// intercepted TLS connection and forwards it to the real host over TLS.
func (p *Proxy) serveIntercepted(w http.ResponseWriter, r *http.Request) {
	t := targetFrom(r.Context())
	if t == nil {
		http.Error(w, "cairn HTTP proxy: no target", http.StatusInternalServerError)
		return
	}
	deny := func(reason string) {
		p.deny(w, KindIntercepted, &DeniedError{Host: t.host, Port: t.port, Method: r.Method, Reason: reason})
	}
	if r.Method == http.MethodConnect {
		deny("CONNECT inside an intercepted connection")
		return
	}
	hh, hp := r.Host, ""
	if h, ps, err := net.SplitHostPort(r.Host); err == nil {
		hh, hp = h, ps
	}
	if host, port, ok := splitTarget(hh, hp, t.port); !ok || host != t.host || port != t.port {
		deny(fmt.Sprintf("the request names host %q but the connection was opened to %s", r.Host, hostPort(t.host, t.port)))
		return
	}
	if !t.rules.allowed(r.Method, t.port) {
		deny(t.rules.describe())
		return
	}
	p.forward(w, r, "https", t.host, t.port, KindIntercepted)
}

// chanListener hands connections to the inner server.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// push gives c to the inner server; false once closed.
func (l *chanListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
