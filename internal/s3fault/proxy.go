package s3fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a fault-injecting HTTP reverse proxy on a loopback port in front
// of one S3 server. Its methods are safe for concurrent use, and faults may
// be injected and cleared while requests are in flight.
type Proxy struct {
	upstream  *url.URL
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	ctx       context.Context // canceled by Close: ends delays and copies
	cancel    context.CancelFunc
	down      atomic.Bool
	reqID     atomic.Uint64

	mu       sync.Mutex
	rules    []*rule
	stats    Stats
	closed   bool
	handlers sync.WaitGroup // serve calls in flight
	serveErr chan error     // Serve's result
}

// Stats counts what the proxy saw and did since it started.
type Stats struct {
	// Requests counts the requests the proxy read, by method ("GET"),
	// whatever happened to them afterwards.
	Requests map[string]int
	// Injected counts the requests each kind of fault hit.
	Injected map[Kind]int
	// Forwarded counts the requests sent to the upstream.
	Forwarded int
	// Refused counts the connections and requests reset because the proxy
	// was down.
	Refused int
}

// Total is the number of requests read, all methods together.
func (s Stats) Total() int {
	n := 0
	for _, c := range s.Requests {
		n += c
	}
	return n
}

func (s Stats) String() string {
	methods := slices.Sorted(maps.Keys(s.Requests))
	out := "requests"
	for _, m := range methods {
		out += fmt.Sprintf(" %s=%d", m, s.Requests[m])
	}
	out += fmt.Sprintf("; forwarded %d; refused %d; injected", s.Forwarded, s.Refused)
	for _, k := range slices.Sorted(maps.Keys(s.Injected)) {
		out += fmt.Sprintf(" %s=%d", k, s.Injected[k])
	}
	return out
}

// New starts a proxy on 127.0.0.1 (a free port) that forwards to upstream,
// the base URL of an S3 server ("http://127.0.0.1:7070"). Point a
// path-style S3 client at URL(), inject faults, and Close the proxy when
// done.
func New(upstream string) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("s3fault: upstream %q: %w", upstream, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("s3fault: upstream %q: want a base URL such as http://127.0.0.1:7070, without path, query or credentials", upstream)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("s3fault: listen on loopback: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream: &url.URL{Scheme: u.Scheme, Host: u.Host},
		ctx:      ctx,
		cancel:   cancel,
		transport: &http.Transport{
			Proxy:       nil, // never an HTTP_PROXY from the environment
			DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			// Bodies pass through as they are: no "Accept-Encoding:
			// gzip" added, nothing decompressed.
			DisableCompression:    true,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       30 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		stats:    Stats{Requests: map[string]int{}, Injected: map[Kind]int{}},
		serveErr: make(chan error, 1),
	}
	p.ln = &listener{Listener: ln, p: p}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serve),
		ReadHeaderTimeout: time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		// Hijacked and aborted connections are the point here, not
		// news: keep net/http's complaints about them out of test logs.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() { p.serveErr <- p.srv.Serve(p.ln) }()
	return p, nil
}

// Start is New for tests: it fails tb if the proxy cannot start and closes
// the proxy in tb.Cleanup.
func Start(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	p, err := New(upstream)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// URL is the proxy's base URL, "http://127.0.0.1:PORT": the endpoint to
// give the S3 client.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy: it stops listening, resets every connection, ends
// delays in progress and waits for the requests in flight to finish. It is
// safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()

	p.cancel()
	err := p.srv.Close()
	p.handlers.Wait()
	p.transport.CloseIdleConnections()
	if serr := <-p.serveErr; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// Inject adds a fault. Faults are tried in the order injected; a request
// meets at most one: the first that matches it and whose Count and
// Probability let it hit. Inject panics if f is not valid (see
// Fault.Validate): a test that asks for a fault that cannot be is wrong.
func (p *Proxy) Inject(f Fault) {
	if err := f.Validate(); err != nil {
		panic(err)
	}
	p.mu.Lock()
	p.rules = append(p.rules, newRule(f))
	p.mu.Unlock()
}

// Clear removes every fault and brings the proxy up if it was down.
// Requests already hit by a fault go on suffering it. Stats are kept.
func (p *Proxy) Clear() {
	p.mu.Lock()
	p.rules = nil
	p.mu.Unlock()
	p.down.Store(false)
}

// SetDown takes the proxy down (true), standing for a dead S3: until
// SetDown(false) or Clear, it resets every new connection as soon as it
// accepts it, and every request that arrives on a connection already
// open, so clients fail at once with a connection error. Faults injected
// meanwhile are kept for when it comes back up.
func (p *Proxy) SetDown(down bool) { p.down.Store(down) }

// Stats returns a copy of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Requests:  maps.Clone(p.stats.Requests),
		Injected:  maps.Clone(p.stats.Injected),
		Forwarded: p.stats.Forwarded,
		Refused:   p.stats.Refused,
	}
}

// admit counts a request and picks the fault, if any, that hits it. It
// returns ok false when the proxy is closed or down: the connection is to
// be reset.
func (p *Proxy) admit(r *http.Request) (f *Fault, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false
	}
	p.stats.Requests[r.Method]++
	if p.down.Load() {
		p.stats.Refused++
		return nil, false
	}
	p.handlers.Add(1)
	t := parseTarget(r)
	for i, ru := range p.rules {
		if !ru.Match.matches(r.Method, t) || !ru.roll() {
			continue
		}
		if ru.Count > 0 {
			if ru.left--; ru.left == 0 {
				p.rules = slices.Delete(p.rules, i, i+1)
			}
		}
		p.stats.Injected[ru.Kind]++
		hit := ru.Fault
		return &hit, true
	}
	return nil, true
}

func (p *Proxy) countForwarded() {
	p.mu.Lock()
	p.stats.Forwarded++
	p.mu.Unlock()
}

func (p *Proxy) countRefused() {
	p.mu.Lock()
	p.stats.Refused++
	p.mu.Unlock()
}

func (p *Proxy) nextRequestID() string {
	return "S3FAULT" + strconv.FormatUint(p.reqID.Add(1), 10)
}

// listener resets the connections it accepts while the proxy is down.
type listener struct {
	net.Listener
	p *Proxy
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.p.down.Load() {
			return c, nil
		}
		l.p.countRefused()
		resetConn(c)
	}
}

// resetConn closes c with SO_LINGER 0, so the kernel sends RST instead of
// FIN and the peer's next read or write fails with ECONNRESET.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
