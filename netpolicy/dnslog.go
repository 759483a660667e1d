package netpolicy

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Outcome is what the forwarder did with a query.
type Outcome string

const (
	// OutcomeAllowed: the name is allowed; the query was answered from
	// upstream or the cache (the Rcode says how: NOERROR, NXDOMAIN...).
	OutcomeAllowed Outcome = "allowed"
	// OutcomeRefused: the name is not allowed (or the query kind is not
	// served): REFUSED or NOTIMP, nothing sent upstream.
	OutcomeRefused Outcome = "refused"
	// OutcomeFailed: the name is allowed but no upstream answered, or the
	// answer's addresses could not be allowed: SERVFAIL.
	OutcomeFailed Outcome = "failed"
)

// DNSQuery counts the queries for one (name, type, outcome, rcode).
type DNSQuery struct {
	Name    string  `json:"name"` // lower case, no trailing dot
	Type    string  `json:"type"` // A, AAAA, HTTPS...
	Outcome Outcome `json:"outcome"`
	Rcode   string  `json:"rcode"` // NOERROR, NXDOMAIN, REFUSED, SERVFAIL...
	Count   uint64  `json:"count"`
	// First and Last are the first and latest such query.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Answers is the distinct addresses answered (and allowed), up to
	// maxLogAddrs; Stripped those removed as private (DNS rebinding).
	Answers  []netip.Addr `json:"answers,omitempty"`
	Stripped []netip.Addr `json:"stripped,omitempty"`
}

// DNSLog is the forwarder's query log.
type DNSLog struct {
	// Queries is sorted by name, type, outcome.
	Queries []DNSQuery `json:"queries"`
	// Dropped counts queries not logged because the log held
	// ForwarderConfig.MaxLogNames entries already.
	Dropped uint64 `json:"dropped,omitempty"`
}

const maxLogAddrs = 64

type logKey struct {
	name    string
	qtype   uint16
	outcome Outcome
	rcode   int
}

type queryLog struct {
	mu      sync.Mutex
	max     int
	m       map[logKey]*DNSQuery
	dropped uint64
}

func newQueryLog(max int) *queryLog { return &queryLog{max: max, m: map[logKey]*DNSQuery{}} }

func (l *queryLog) record(name string, qtype uint16, o Outcome, rcode int, answers, stripped []netip.Addr) {
	now := time.Now()
	k := logKey{name, qtype, o, rcode}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[k]
	if !ok {
		if len(l.m) >= l.max {
			l.dropped++
			return
		}
		e = &DNSQuery{Name: name, Type: qtypeString(qtype), Outcome: o, Rcode: rcodeString(rcode), First: now}
		l.m[k] = e
	}
	e.Count++
	e.Last = now
	e.Answers = addDistinct(e.Answers, answers)
	e.Stripped = addDistinct(e.Stripped, stripped)
}

func addDistinct(set, add []netip.Addr) []netip.Addr {
	for _, a := range add {
		if len(set) < maxLogAddrs && !slices.Contains(set, a) {
			set = append(set, a)
		}
	}
	return set
}

func (l *queryLog) snapshot() DNSLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := DNSLog{Dropped: l.dropped}
	for _, e := range l.m {
		c := *e
		c.Answers = slices.Clone(e.Answers)
		c.Stripped = slices.Clone(e.Stripped)
		out.Queries = append(out.Queries, c)
	}
	slices.SortFunc(out.Queries, func(a, b DNSQuery) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Type, b.Type), cmp.Compare(a.Outcome, b.Outcome), cmp.Compare(a.Rcode, b.Rcode))
	})
	return out
}
