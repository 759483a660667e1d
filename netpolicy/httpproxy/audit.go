package httpproxy

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Verdict is what the proxy did with a request or tunnel.
type Verdict string

const (
	// Allowed: the policy allowed it; the proxy forwarded it or opened the
	// tunnel (the destination may still have failed: see Logf).
	Allowed Verdict = "allowed"
	// Denied: the policy refused it and the client got 403.
	Denied Verdict = "denied"
)

// Kind is how a request reached the proxy.
type Kind string

const (
	// KindHTTP: a plain http:// request forwarded by the proxy.
	KindHTTP Kind = "http"
	// KindTunnel: a CONNECT request; the proxy relays bytes it does not read.
	KindTunnel Kind = "tunnel"
	// KindIntercepted: a CONNECT to a host with method rules, whose TLS the
	// proxy terminates (Method CONNECT), and each request read inside it.
	KindIntercepted Kind = "intercepted"
)

// Entry counts the requests or tunnels with one host, port, method, kind
// and verdict.
type Entry struct {
	Host    string  // lower-case name or IP literal, as the client asked
	Port    uint16  // destination port
	Method  string  // HTTP method, CONNECT for a tunnel
	Kind    Kind    // how it came
	Verdict Verdict // allowed or denied
	Count   uint64  // how many times
	First   time.Time
	Last    time.Time
}

type auditKey struct {
	host    string
	port    uint16
	method  string
	kind    Kind
	verdict Verdict
}

type audit struct {
	mu      sync.Mutex
	max     int
	entries map[auditKey]*Entry
	dropped uint64
}

func (a *audit) record(host string, port uint16, method string, kind Kind, v Verdict) {
	k := auditKey{host, port, method, kind, v}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entries[k]
	if e == nil {
		if len(a.entries) >= a.max {
			a.dropped++
			return
		}
		e = &Entry{Host: host, Port: port, Method: method, Kind: kind, Verdict: v, First: now}
		a.entries[k] = e
	}
	e.Count++
	e.Last = now
}

// snapshot returns the entries sorted by host, port, kind, method and
// verdict; with reset, it starts a new period.
func (a *audit) snapshot(reset bool) ([]Entry, uint64) {
	a.mu.Lock()
	out := make([]Entry, 0, len(a.entries))
	for _, e := range a.entries {
		out = append(out, *e)
	}
	dropped := a.dropped
	if reset {
		a.entries = make(map[auditKey]*Entry)
		a.dropped = 0
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y Entry) int {
		return cmp.Or(cmp.Compare(x.Host, y.Host), cmp.Compare(x.Port, y.Port), cmp.Compare(x.Kind, y.Kind),
			cmp.Compare(x.Method, y.Method), cmp.Compare(x.Verdict, y.Verdict))
	})
	return out, dropped
}

// Audit returns what the proxy decided since New or the last TakeAudit,
// sorted by host, port, kind, method and verdict.
func (p *Proxy) Audit() []Entry {
	e, _ := p.audit.snapshot(false)
	return e
}

// TakeAudit returns the entries like Audit, and how many decisions were
// not kept because MaxAuditEntries distinct entries existed, and starts a
// new period (one per turn).
func (p *Proxy) TakeAudit() (entries []Entry, dropped uint64) {
	return p.audit.snapshot(true)
}

// AuditDropped returns how many decisions were not kept since New or the
// last TakeAudit because MaxAuditEntries distinct entries existed.
func (p *Proxy) AuditDropped() uint64 {
	p.audit.mu.Lock()
	defer p.audit.mu.Unlock()
	return p.audit.dropped
}
