package s3fault

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// Kind is what a fault does to the requests it hits.
type Kind int

// The kinds of fault. "Before forwarding" means the upstream never sees the
// request: a PUT hit by Error or Reset did not happen. The kinds that act on
// the response forward the request first: a PUT hit by DropResponse, say,
// did happen, and the client cannot tell.
const (
	// Latency waits Delay before forwarding, then sends the response body
	// at BytesPerSecond (either may be zero, not both).
	Latency Kind = iota + 1
	// Error answers, before forwarding, with Status and an S3 XML error
	// body carrying Code, as S3 itself would.
	Error
	// Reset resets the connection (TCP RST: the client sees ECONNRESET)
	// before forwarding.
	Reset
	// DropResponse forwards the request, so the upstream acts on it, then
	// resets the connection instead of answering: a lost response.
	DropResponse
	// ResetBody forwards the request, sends the upstream's status line and
	// headers and the first After bytes of its body, then resets the
	// connection.
	ResetBody
	// Truncate forwards the request, sends the upstream's status line and
	// headers (Content-Length included) and the first After bytes of its
	// body, then closes the connection cleanly (FIN): the client sees an
	// unexpected EOF.
	Truncate
	// Corrupt forwards the request and sends the whole response with the
	// byte at offset After of the body inverted (the last byte if the body
	// is shorter). The length, headers and status are the upstream's: only
	// a check of the content can tell.
	Corrupt
)

var kindNames = [...]string{
	Latency:      "latency",
	Error:        "error",
	Reset:        "reset",
	DropResponse: "drop-response",
	ResetBody:    "reset-body",
	Truncate:     "truncate",
	Corrupt:      "corrupt",
}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Match selects requests by method, bucket and key. The zero Match selects
// every request. The proxy expects path-style addressing: the first segment
// of the path is the bucket, the rest is the object key. For a request on
// the bucket itself (ListObjectsV2) the key is the listing's "prefix" query
// parameter, so that a Match on "packs/" also catches listings of packs.
type Match struct {
	// Method is the HTTP method ("GET", "PUT", "HEAD", "DELETE", "POST"),
	// compared without regard to case. Default "": any.
	Method string
	// Bucket is the bucket name, exactly. Default "": any.
	Bucket string
	// KeyPrefix must begin the object key (after URL decoding). Cairn's
	// store prefix, if any, is part of the object key: with store prefix
	// "t1", pack objects start with "t1/packs/". Default "": any.
	KeyPrefix string
	// KeyContains must occur in the object key. Default "": any.
	KeyContains string
}

// Matches reports whether m selects r.
func (m Match) Matches(r *http.Request) bool {
	return m.matches(r.Method, parseTarget(r))
}

func (m Match) matches(method string, t target) bool {
	return (m.Method == "" || strings.EqualFold(m.Method, method)) &&
		(m.Bucket == "" || m.Bucket == t.bucket) &&
		strings.HasPrefix(t.key, m.KeyPrefix) &&
		strings.Contains(t.key, m.KeyContains)
}

// target is the bucket and key a path-style request addresses.
type target struct {
	bucket, key string
}

func parseTarget(r *http.Request) target {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if key == "" {
		key = r.URL.Query().Get("prefix")
	}
	return target{bucket: bucket, key: key}
}

// Fault describes one fault to inject. Kind is required. The fields after
// Seed belong to the kinds their comments name; Validate rejects them on
// other kinds.
type Fault struct {
	// Kind is what the fault does. Required.
	Kind Kind
	// Match selects the requests the fault may hit. Default: all.
	Match Match
	// Count is how many requests the fault hits before it removes itself:
	// 2 means "the next two matching requests". Default 0: every matching
	// request until Clear.
	Count int
	// Probability is the chance, from 0 to 1, that a matching request is
	// hit, drawn from a generator seeded with Seed, so a sequence of
	// requests meets the same faults on every run. Default 0: always.
	Probability float64
	// Seed seeds the fault's own random generator (PCG); only used with
	// Probability. Default 0, a fixed seed like any other.
	Seed uint64

	// Delay is how long Latency waits before forwarding. Default 0: none.
	Delay time.Duration
	// BytesPerSecond throttles the response body under Latency. Default
	// 0: no throttle.
	BytesPerSecond int64

	// Status is the HTTP status Error answers, 400 to 599. Default 0: 500.
	Status int
	// Code is the S3 error code in Error's body ("SlowDown"). Default "":
	// the usual code for Status (500 InternalError, 503 SlowDown, 404
	// NoSuchKey, 403 AccessDenied, 412 PreconditionFailed...).
	Code string

	// After is how many bytes of the response body ResetBody and Truncate
	// send before they cut the connection, and the offset of the byte
	// Corrupt inverts. ResetBody and Truncate always withhold at least the
	// last byte of a non-empty body. Default 0.
	After int64
}

// Validate reports the first problem with f, if any.
func (f Fault) Validate() error {
	if f.Kind <= 0 || int(f.Kind) >= len(kindNames) {
		return fmt.Errorf("s3fault: unknown fault kind %d", int(f.Kind))
	}
	if f.Count < 0 {
		return fmt.Errorf("s3fault: %s fault: count %d is negative (0 means every matching request)", f.Kind, f.Count)
	}
	if !(f.Probability >= 0 && f.Probability <= 1) { // also catches NaN
		return fmt.Errorf("s3fault: %s fault: probability %v is not between 0 and 1 (0 means always)", f.Kind, f.Probability)
	}
	if f.Delay < 0 || f.BytesPerSecond < 0 || f.After < 0 {
		return fmt.Errorf("s3fault: %s fault: negative delay, rate or offset", f.Kind)
	}
	if (f.Delay != 0 || f.BytesPerSecond != 0) && f.Kind != Latency {
		return fmt.Errorf("s3fault: %s fault: Delay and BytesPerSecond belong to Latency faults", f.Kind)
	}
	if (f.Status != 0 || f.Code != "") && f.Kind != Error {
		return fmt.Errorf("s3fault: %s fault: Status and Code belong to Error faults", f.Kind)
	}
	if f.After != 0 && f.Kind != ResetBody && f.Kind != Truncate && f.Kind != Corrupt {
		return fmt.Errorf("s3fault: %s fault: After belongs to ResetBody, Truncate and Corrupt faults", f.Kind)
	}
	switch f.Kind {
	case Latency:
		if f.Delay == 0 && f.BytesPerSecond == 0 {
			return errors.New("s3fault: latency fault: set Delay, BytesPerSecond or both")
		}
	case Error:
		if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
			return fmt.Errorf("s3fault: error fault: status %d is not an HTTP error (400 to 599)", f.Status)
		}
	}
	return nil
}

// withDefaults fills in Error's status and code.
func (f Fault) withDefaults() Fault {
	if f.Kind == Error {
		if f.Status == 0 {
			f.Status = http.StatusInternalServerError
		}
		if f.Code == "" {
			f.Code = defaultCode(f.Status)
		}
	}
	return f
}

// rule is an injected fault with its state.
type rule struct {
	Fault
	left int        // hits left when Count > 0
	rng  *rand.Rand // when 0 < Probability < 1
}

func newRule(f Fault) *rule {
	r := &rule{Fault: f.withDefaults(), left: f.Count}
	if f.Probability > 0 && f.Probability < 1 {
		r.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	}
	return r
}

// roll decides whether the rule hits a request it matches. Callers hold
// the proxy's lock, so the generator's sequence follows the order of
// requests.
func (r *rule) roll() bool {
	return r.rng == nil || r.rng.Float64() < r.Probability
}
