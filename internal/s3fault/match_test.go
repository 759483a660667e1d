package s3fault_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/internal/s3fault"
)

func TestMatch_Matches(t *testing.T) {
	tests := []struct {
		m      s3fault.Match
		method string
		target string
		want   bool
	}{
		{s3fault.Match{}, "GET", "/b/packs/ab/1", true},
		{s3fault.Match{}, "PUT", "/b", true},
		{s3fault.Match{Method: "GET"}, "GET", "/b/k", true},
		{s3fault.Match{Method: "get"}, "GET", "/b/k", true},
		{s3fault.Match{Method: "GET"}, "HEAD", "/b/k", false},
		{s3fault.Match{Bucket: "b"}, "GET", "/b/k", true},
		{s3fault.Match{Bucket: "b"}, "GET", "/bb/k", false},
		{s3fault.Match{KeyPrefix: "packs/"}, "GET", "/b/packs/ab/1", true},
		{s3fault.Match{KeyPrefix: "packs/"}, "GET", "/b/refs/main", false},
		{s3fault.Match{KeyPrefix: "packs/"}, "GET", "/b/t1/packs/ab/1", false},
		{s3fault.Match{KeyContains: "packs/"}, "GET", "/b/t1/packs/ab/1", true},
		{s3fault.Match{KeyPrefix: "a b/"}, "GET", "/b/a%20b/c", true}, // decoded
		{s3fault.Match{KeyPrefix: "packs/"}, "GET", "/b?list-type=2&prefix=packs%2Fab", true},
		{s3fault.Match{KeyPrefix: "packs/"}, "GET", "/b?list-type=2&prefix=refs%2F", false},
		{s3fault.Match{KeyPrefix: "packs/"}, "GET", "/b?list-type=2", false},
		{s3fault.Match{Method: "PUT", Bucket: "b", KeyPrefix: "refs/", KeyContains: "main"}, "PUT", "/b/refs/main", true},
		{s3fault.Match{Method: "PUT", Bucket: "b", KeyPrefix: "refs/", KeyContains: "main"}, "PUT", "/b/refs/dev", false},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if got := tc.m.Matches(r); got != tc.want {
			t.Errorf("%+v.Matches(%s %s) = %v, want %v", tc.m, tc.method, tc.target, got, tc.want)
		}
	}
}

func TestFault_Validate(t *testing.T) {
	valid := []s3fault.Fault{
		{Kind: s3fault.Latency, Delay: time.Second},
		{Kind: s3fault.Latency, BytesPerSecond: 1},
		{Kind: s3fault.Error},
		{Kind: s3fault.Error, Status: 503, Code: "SlowDown", Count: 2, Probability: 0.5, Seed: 7},
		{Kind: s3fault.Reset, Match: s3fault.Match{Method: "GET"}},
		{Kind: s3fault.DropResponse},
		{Kind: s3fault.ResetBody, After: 10},
		{Kind: s3fault.Truncate},
		{Kind: s3fault.Corrupt, After: 1, Probability: 1},
	}
	for _, f := range valid {
		if err := f.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v, want nil", f, err)
		}
	}
	invalid := []s3fault.Fault{
		{},
		{Kind: 99},
		{Kind: s3fault.Latency},
		{Kind: s3fault.Latency, Delay: -1},
		{Kind: s3fault.Error, Status: 200},
		{Kind: s3fault.Error, Status: 600},
		{Kind: s3fault.Error, Count: -1},
		{Kind: s3fault.Error, Probability: 1.5},
		{Kind: s3fault.Error, Probability: -0.1},
		{Kind: s3fault.Error, Probability: math.NaN()},
		{Kind: s3fault.Reset, Status: 500},
		{Kind: s3fault.Reset, After: 5},
		{Kind: s3fault.Truncate, Delay: time.Second},
		{Kind: s3fault.Corrupt, After: -1},
	}
	for _, f := range invalid {
		if err := f.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", f)
		}
	}
	p, err := s3fault.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defer func() {
		if recover() == nil {
			t.Errorf("Inject of an invalid fault did not panic")
		}
	}()
	p.Inject(s3fault.Fault{Kind: s3fault.Latency})
}

func TestKind_String(t *testing.T) {
	for k, want := range map[s3fault.Kind]string{
		s3fault.Latency: "latency", s3fault.Error: "error", s3fault.Reset: "reset",
		s3fault.DropResponse: "drop-response", s3fault.ResetBody: "reset-body",
		s3fault.Truncate: "truncate", s3fault.Corrupt: "corrupt", 0: "Kind(0)",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

// TestFault_Match checks filters against the real client's requests: only
// matching requests are hit, and a list of a prefix matches it.
func TestFault_Match(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t, "t1")
	ctx := context.Background()
	for _, k := range []string{"packs/a", "refs/main"} {
		if _, err := b.Put(ctx, k, strings.NewReader(k), backend.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Match: s3fault.Match{Bucket: "other-bucket"}})
	e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Match: s3fault.Match{KeyPrefix: "packs/"}}) // the store prefix comes first
	e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Status: 403, Match: s3fault.Match{Method: "GET", KeyContains: "/packs/"}})

	read := func(key string) error {
		rc, err := b.Get(ctx, key, 0, -1)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.ReadAll(rc)
		return err
	}
	if err := read("refs/main"); err != nil {
		t.Errorf("Get(refs/main): %v; no fault matches it", err)
	}
	if _, err := b.Stat(ctx, "packs/a"); err != nil {
		t.Errorf("Stat(packs/a): %v; the GET-only fault must not hit a HEAD", err)
	}
	if err := read("packs/a"); !errors.Is(err, backend.ErrPermission) {
		t.Errorf("Get(packs/a): %v, want the injected 403 (ErrPermission)", err)
	}
	err := b.List(ctx, "packs/", func(backend.Info) error { return nil })
	if !errors.Is(err, backend.ErrPermission) {
		t.Errorf("List(packs/): %v, want the injected 403: a listing's prefix is its key", err)
	}
	if err := b.List(ctx, "refs/", func(backend.Info) error { return nil }); err != nil {
		t.Errorf("List(refs/): %v", err)
	}
	if got := e.proxy.Stats().Injected[s3fault.Error]; got != 2 {
		t.Errorf("%d errors injected, want 2", got)
	}
}

// TestFault_Order checks that faults are tried in the order injected, one
// per request, and that a fault whose Count is spent goes away.
func TestFault_Order(t *testing.T) {
	e := newEnv(t)
	e.put(t, "k", []byte("data"))
	c := e.proxied(t, func(o *awss3.Options) { o.RetryMaxAttempts = 1 })
	e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Status: 500, Count: 1})
	e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Status: 503, Count: 2})
	e.proxy.Inject(s3fault.Fault{Kind: s3fault.Reset, Count: 1})
	var got []string
	for range 5 {
		_, err := get(c, e.bucket, "k")
		switch {
		case err == nil:
			got = append(got, "ok")
		case isConnReset(err):
			got = append(got, "reset")
		default:
			got = append(got, fmt.Sprint(httpStatus(err)))
		}
	}
	if got, want := strings.Join(got, " "), "500 503 503 reset ok"; got != want {
		t.Errorf("outcomes = %q, want %q", got, want)
	}
}

// TestFault_Probability checks that a seeded probability gives the same
// hits on every run, and a different seed different ones.
func TestFault_Probability(t *testing.T) {
	e := newEnv(t)
	e.put(t, "k", []byte("data"))
	c := e.proxied(t, func(o *awss3.Options) { o.RetryMaxAttempts = 1 })
	pattern := func(seed uint64) string {
		e.proxy.Clear()
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Probability: 0.5, Seed: seed})
		var sb strings.Builder
		for range 40 {
			if _, err := get(c, e.bucket, "k"); err != nil {
				sb.WriteByte('x')
			} else {
				sb.WriteByte('.')
			}
		}
		return sb.String()
	}
	a, again, other := pattern(42), pattern(42), pattern(43)
	if a != again {
		t.Errorf("seed 42 gave %s, then %s", a, again)
	}
	if a == other {
		t.Errorf("seeds 42 and 43 gave the same %s", a)
	}
	if n := strings.Count(a, "x"); n == 0 || n == len(a) {
		t.Errorf("probability 0.5 hit %d of %d requests: %s", n, len(a), a)
	}
}

// TestProxy_Concurrent runs requests while faults come and go, for the
// race detector, and checks that service is whole once they are cleared.
func TestProxy_Concurrent(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t, "")
	ctx := context.Background()
	data := randBytes(8, 64<<10)
	for i := range 4 {
		if _, err := b.Put(ctx, fmt.Sprintf("packs/%d", i), bytes.NewReader(data), backend.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ops := 0
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("packs/%d", (w+i)%4)
				if rc, err := b.Get(ctx, key, 0, -1); err == nil {
					_, _ = io.Copy(io.Discard, rc)
					rc.Close()
				}
				_, _ = b.Stat(ctx, key)
				mu.Lock()
				ops += 2
				mu.Unlock()
			}
		})
	}
	kinds := []s3fault.Fault{
		{Kind: s3fault.Error, Status: 503, Count: 3},
		{Kind: s3fault.Reset, Count: 2},
		{Kind: s3fault.Truncate, After: 100, Count: 2},
		{Kind: s3fault.Corrupt, Probability: 0.3, Seed: 1},
		{Kind: s3fault.ResetBody, After: 10, Count: 1},
		{Kind: s3fault.Latency, Delay: time.Millisecond, BytesPerSecond: 1 << 20, Count: 5},
	}
	for round := range 30 {
		e.proxy.Inject(kinds[round%len(kinds)])
		e.proxy.SetDown(round%7 == 3)
		_ = e.proxy.Stats()
		if round%5 == 4 {
			e.proxy.Clear()
		}
		time.Sleep(2 * time.Millisecond)
	}
	e.proxy.Clear()
	close(stop)
	wg.Wait()

	for i := range 4 {
		rc, err := b.Get(ctx, fmt.Sprintf("packs/%d", i), 0, -1)
		if err != nil {
			t.Fatalf("Get after Clear: %v", err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after Clear: err %v, equal %v", err, bytes.Equal(got, data))
		}
	}
	st := e.proxy.Stats()
	if st.Forwarded > st.Total() {
		t.Errorf("forwarded %d of %d requests", st.Forwarded, st.Total())
	}
	t.Logf("%d operations; %v", ops, st)
}
