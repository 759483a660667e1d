package chunkstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

// leaseClock is a settable clock for lease tests: expiry without sleeping.
type leaseClock struct {
	mu sync.Mutex
	t  time.Time
}

func newLeaseClock() *leaseClock {
	return &leaseClock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *leaseClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *leaseClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func holder(name string, pid int) chunkstore.LeaseHolder {
	return chunkstore.LeaseHolder{ID: "id-" + name, Host: "host-" + name, PID: pid, Description: "mount /work/" + name}
}

const leaseTTL = 30 * time.Second

// leaseEnv is one store seen by two machines: a and b are stores opened on
// two backends (two clients) of the same location; raw is a third one.
type leaseEnv struct {
	a, b *chunkstore.Store
	raw  backend.Backend
}

// newEnv makes a leaseEnv on a fresh location, and wrap (if not nil) wraps
// the backend of store a.
type newEnv func(t *testing.T, wrap func(backend.Backend) backend.Backend) *leaseEnv

func TestLease_Local(t *testing.T) {
	runLeaseTests(t, func(t *testing.T, wrap func(backend.Backend) backend.Backend) *leaseEnv {
		be := chunkstoretest.LocalBackend(t)
		return openLeaseEnv(t, be, wrap, func() backend.Backend {
			b, err := local.Open(be.Root(), local.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		})
	})
}

func TestLease_S3(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	var n atomic.Int64
	runLeaseTests(t, func(t *testing.T, wrap func(backend.Backend) backend.Backend) *leaseEnv {
		prefix := fmt.Sprintf("lease-%d", n.Add(1))
		return openLeaseEnv(t, srv.Backend(t, bucket, prefix), wrap, func() backend.Backend {
			return srv.Backend(t, bucket, prefix)
		})
	})
}

func openLeaseEnv(t *testing.T, first backend.Backend, wrap func(backend.Backend) backend.Backend, another func() backend.Backend) *leaseEnv {
	t.Helper()
	if _, err := chunkstore.Init(ctx, first, chunkstore.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	open := func(be backend.Backend) *chunkstore.Store {
		s, err := chunkstore.Open(ctx, be, chunkstore.Options{CacheDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	var abe backend.Backend = first
	if wrap != nil {
		abe = wrap(first)
	}
	return &leaseEnv{a: open(abe), b: open(another()), raw: another()}
}

func runLeaseTests(t *testing.T, env newEnv) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, env newEnv)
	}{
		{"Acquire", testLeaseAcquire},
		{"SecondHolderRefused", testLeaseSecondHolderRefused},
		{"TakeoverAfterExpiry", testLeaseTakeoverAfterExpiry},
		{"SameHolderReacquires", testLeaseSameHolderReacquires},
		{"RenewExtends", testLeaseRenewExtends},
		{"RenewBackendDown", testLeaseRenewBackendDown},
		{"LostReply", testLeaseLostReply},
		{"Release", testLeaseRelease},
		{"ConcurrentAcquire", testLeaseConcurrentAcquire},
		{"ConcurrentTakeover", testLeaseConcurrentTakeover},
		{"Corrupt", testLeaseCorrupt},
		{"Invalid", testLeaseInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, env) })
	}
}

func acquire(t *testing.T, s *chunkstore.Store, ws string, h chunkstore.LeaseHolder, clk *leaseClock, force bool) *chunkstore.Lease {
	t.Helper()
	l, err := s.AcquireLease(ctx, ws, h, chunkstore.LeaseOptions{TTL: leaseTTL, Force: force, Now: clk.Now})
	if err != nil {
		t.Fatalf("AcquireLease(%s, %s, force=%v): %v", ws, h.Host, force, err)
	}
	return l
}

func wantLeased(t *testing.T, err error, contains ...string) {
	t.Helper()
	if !errors.Is(err, chunkstore.ErrLeased) || !errors.Is(err, chunkstore.ErrConflict) {
		t.Fatalf("err = %v, want ErrLeased (and so ErrConflict)", err)
	}
	t.Logf("as expected: %v", err)
	for _, s := range contains {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

// checkHolder checks, through the other store, who holds the lease.
func checkHolder(t *testing.T, s *chunkstore.Store, ws string, h chunkstore.LeaseHolder, gen uint64) *chunkstore.LeaseInfo {
	t.Helper()
	info, err := s.Lease(ctx, ws)
	if err != nil {
		t.Fatalf("Lease(%s): %v", ws, err)
	}
	if info.Holder != h || info.Generation != gen || info.Workspace != ws {
		t.Fatalf("Lease(%s) = holder %+v generation %d, want %+v generation %d", ws, info.Holder, info.Generation, h, gen)
	}
	return info
}

func testLeaseAcquire(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	if _, err := e.b.Lease(ctx, "w"); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Fatalf("Lease before any acquire: err = %v, want ErrNotFound", err)
	}
	t0 := clk.Now()
	l := acquire(t, e.a, "w", holder("a", 101), clk, false)
	info := checkHolder(t, e.b, "w", holder("a", 101), 1)
	if !info.Acquired.Equal(t0) || !info.Renewed.Equal(t0) || !info.Expires.Equal(t0.Add(leaseTTL)) {
		t.Fatalf("stored times %v %v %v, want acquired = renewed = %v, expires +%v", info.Acquired, info.Renewed, info.Expires, t0, leaseTTL)
	}
	if got := l.Info(); !got.Expires.Equal(info.Expires) || got.Holder != info.Holder || got.Generation != 1 {
		t.Fatalf("Lease.Info = %+v, stored %+v", got, info)
	}
	if l.TTL() != leaseTTL {
		t.Fatalf("TTL = %v", l.TTL())
	}
	if info.Expired(t0.Add(leaseTTL+chunkstore.LeaseGrace)) || !info.Expired(t0.Add(leaseTTL+chunkstore.LeaseGrace+time.Nanosecond)) {
		t.Fatal("Expired: a lease must count as expired only after expiry + LeaseGrace")
	}
	// Another workspace is another lease.
	acquire(t, e.b, "other", holder("b", 202), clk, false)
	checkHolder(t, e.a, "other", holder("b", 202), 1)
}

func testLeaseSecondHolderRefused(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	acquire(t, e.a, "w", holder("a", 101), clk, false)
	clk.Add(5 * time.Second)
	for _, force := range []bool{false, true} {
		_, err := e.b.AcquireLease(ctx, "w", holder("b", 202), chunkstore.LeaseOptions{TTL: leaseTTL, Force: force, Now: clk.Now})
		// The holder, the expiry (and how far away it is), when --force
		// would work, and what to do.
		wantLeased(t, err, `workspace "w"`, "host-a", "pid 101", "mount /work/a", "until 2026-05-01 12:00:30 UTC (in 25s)",
			"after 2026-05-01 12:00:40 UTC (in 35s)", "unmount it there", "--force")
		if got := strings.Contains(err.Error(), "only an expired lease"); got != force {
			t.Errorf("force=%v: error says --force works only after expiry: %v (%q)", force, got, err)
		}
	}
	// Past the expiry but within the grace for clock differences: still
	// refused, forced or not.
	clk.Add(30 * time.Second) // 12:00:35
	_, err := e.b.AcquireLease(ctx, "w", holder("b", 202), chunkstore.LeaseOptions{TTL: leaseTTL, Force: true, Now: clk.Now})
	wantLeased(t, err, "host-a", "expired at 2026-05-01 12:00:30 UTC (5s ago)", "clock differences", "after 2026-05-01 12:00:40 UTC (in 5s)")
	checkHolder(t, e.a, "w", holder("a", 101), 1)
}

func testLeaseTakeoverAfterExpiry(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	la := acquire(t, e.a, "w", holder("a", 101), clk, false)
	clk.Add(leaseTTL + chunkstore.LeaseGrace + time.Second)

	// Expired, not forced: refused, saying that --force would do.
	_, err := e.b.AcquireLease(ctx, "w", holder("b", 202), chunkstore.LeaseOptions{TTL: leaseTTL, Now: clk.Now})
	wantLeased(t, err, "host-a", "pid 101", "expired at 2026-05-01 12:00:30 UTC (11s ago)", "mount with --force")
	checkHolder(t, e.b, "w", holder("a", 101), 1)

	lb := acquire(t, e.b, "w", holder("b", 202), clk, true)
	if lb.Info().Generation != 2 {
		t.Fatalf("generation after takeover = %d, want 2", lb.Info().Generation)
	}
	checkHolder(t, e.a, "w", holder("b", 202), 2)

	// The old holder finds out at its next renewal, and keeps saying so.
	for range 2 {
		wantLeased(t, la.Renew(ctx), "lost", "taken over", "host-b", "pid 202", "stop serving writes")
	}
	// Its release leaves the new holder's lease alone.
	wantLeased(t, la.Release(ctx), "lost")
	checkHolder(t, e.a, "w", holder("b", 202), 2)
	if err := lb.Renew(ctx); err != nil {
		t.Fatalf("new holder's renewal: %v", err)
	}
}

func testLeaseSameHolderReacquires(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	old := acquire(t, e.a, "w", holder("a", 101), clk, false)
	clk.Add(time.Second)

	// A restarted daemon: same ID and host, another pid; the lease is live
	// and not forced.
	restarted := holder("a", 102)
	l := acquire(t, e.b, "w", restarted, clk, false)
	if got := l.Info(); got.Generation != 2 || !got.Acquired.Equal(clk.Now()) {
		t.Fatalf("re-acquired lease = %+v, want generation 2 acquired now", got)
	}
	checkHolder(t, e.a, "w", restarted, 2)
	wantLeased(t, old.Renew(ctx), "lost", "same holder ID", "pid 102")
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}

	// The same ID on another host (a cloned state directory) is another
	// holder.
	clone := restarted
	clone.Host = "host-clone"
	_, err := e.a.AcquireLease(ctx, "w", clone, chunkstore.LeaseOptions{TTL: leaseTTL, Now: clk.Now})
	wantLeased(t, err, "host-a", "pid 102")
}

func testLeaseRenewExtends(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	t0 := clk.Now()
	l := acquire(t, e.a, "w", holder("a", 101), clk, false)
	for i := 1; i <= 3; i++ {
		clk.Add(10 * time.Second)
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		now := clk.Now()
		info := checkHolder(t, e.b, "w", holder("a", 101), 1)
		if !info.Renewed.Equal(now) || !info.Expires.Equal(now.Add(leaseTTL)) || !info.Acquired.Equal(t0) {
			t.Fatalf("after renewal %d: stored %+v, want renewed %v, expires +%v", i, info, now, leaseTTL)
		}
		if got := l.Info(); !got.Expires.Equal(info.Expires) {
			t.Fatalf("Lease.Info().Expires = %v, stored %v", got.Expires, info.Expires)
		}
	}
	// Past the first expiry and its grace, the renewed lease still holds.
	clk.Add(leaseTTL + chunkstore.LeaseGrace - 30*time.Second + time.Second)
	_, err := e.b.AcquireLease(ctx, "w", holder("b", 202), chunkstore.LeaseOptions{TTL: leaseTTL, Force: true, Now: clk.Now})
	wantLeased(t, err, "host-a", "only an expired lease")
}

func testLeaseRenewBackendDown(t *testing.T, newEnv newEnv) {
	var faulty *chunkstoretest.Faulty
	e := newEnv(t, func(be backend.Backend) backend.Backend {
		faulty = chunkstoretest.NewFaulty(be)
		return faulty
	})
	clk := newLeaseClock()
	l := acquire(t, e.a, "w", holder("a", 101), clk, false)
	down := fmt.Errorf("connection refused: %w", backend.ErrUnavailable)
	faulty.Fail(chunkstoretest.OpPut, "leases/", -1, down)
	for range 3 {
		clk.Add(10 * time.Second)
		err := l.Renew(ctx)
		if !errors.Is(err, backend.ErrUnavailable) || errors.Is(err, chunkstore.ErrLeased) {
			t.Fatalf("renewal with the backend down: err = %v, want ErrUnavailable, not ErrLeased", err)
		}
	}
	// Past its expiry by our clock, but nobody took it over: the next
	// renewal that reaches the backend keeps it.
	faulty.Heal()
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renewal after the outage: %v", err)
	}
	info := checkHolder(t, e.b, "w", holder("a", 101), 1)
	if !info.Expires.Equal(clk.Now().Add(leaseTTL)) {
		t.Fatalf("expires %v, want %v", info.Expires, clk.Now().Add(leaseTTL))
	}
	// A failed release leaves the lease in place (it expires by itself)
	// and can be retried.
	faulty.Fail(chunkstoretest.OpDelete, "leases/", 1, down)
	if err := l.Release(ctx); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "expires by itself") {
		t.Fatalf("release with the backend down: %v", err)
	}
	checkHolder(t, e.b, "w", holder("a", 101), 1)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Lease(ctx, "w"); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Fatalf("after release: %v", err)
	}
}

// lostReply applies Puts of leases but then reports a failure, as when a
// reply is lost and the request retried: once as unavailable (the caller
// does not know), once as a conflict (the retry found its own write).
type lostReply struct {
	backend.Backend
	mu   sync.Mutex
	errs []error
}

func (b *lostReply) failNext(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, err)
}

func (b *lostReply) Put(ctx context.Context, key string, body io.ReadSeeker, cond backend.Condition) (backend.Info, error) {
	info, err := b.Backend.Put(ctx, key, body, cond)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil || !strings.HasPrefix(key, "leases/") || len(b.errs) == 0 {
		return info, err
	}
	err, b.errs = b.errs[0], b.errs[1:]
	return backend.Info{}, err
}

func testLeaseLostReply(t *testing.T, newEnv newEnv) {
	var lr *lostReply
	e := newEnv(t, func(be backend.Backend) backend.Backend {
		lr = &lostReply{Backend: be}
		return lr
	})
	clk := newLeaseClock()
	// The create succeeded, the reply said conflict: ours all the same.
	lr.failNext(backend.ErrConflict)
	l := acquire(t, e.a, "w", holder("a", 101), clk, false)
	checkHolder(t, e.b, "w", holder("a", 101), 1)

	// A renewal that landed but whose reply was lost...
	clk.Add(10 * time.Second)
	lr.failNext(backend.ErrUnavailable)
	if err := l.Renew(ctx); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("renewal with a lost reply: %v", err)
	}
	// ... and one whose retry said conflict: neither loses the lease.
	clk.Add(10 * time.Second)
	lr.failNext(backend.ErrConflict)
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renewal after a lost reply: %v", err)
	}
	clk.Add(10 * time.Second)
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renewal after a conflicting reply: %v", err)
	}
	info := checkHolder(t, e.b, "w", holder("a", 101), 1)
	if !info.Expires.Equal(clk.Now().Add(leaseTTL)) || !l.Info().Expires.Equal(info.Expires) {
		t.Fatalf("expires %v (ours %v), want %v", info.Expires, l.Info().Expires, clk.Now().Add(leaseTTL))
	}
}

func testLeaseRelease(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	l := acquire(t, e.a, "w", holder("a", 101), clk, false)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Lease(ctx, "w"); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Fatalf("after release: err = %v, want ErrNotFound", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, chunkstore.ErrInvalid) {
		t.Fatalf("renewal after release: %v", err)
	}
	// Free at once for anyone, without --force.
	lb := acquire(t, e.b, "w", holder("b", 202), clk, false)
	checkHolder(t, e.a, "w", holder("b", 202), 1)

	// A release of a lease that was taken over deletes nothing.
	clk.Add(leaseTTL + chunkstore.LeaseGrace + time.Second)
	lc := acquire(t, e.a, "w", holder("c", 303), clk, true)
	wantLeased(t, lb.Release(ctx), "host-c")
	checkHolder(t, e.b, "w", holder("c", 303), 2)
	// A lease deleted behind its holder's back is lost too.
	if err := e.raw.Delete(ctx, "leases/w"); err != nil {
		t.Fatal(err)
	}
	wantLeased(t, lc.Renew(ctx), "deleted")
}

func testLeaseConcurrentAcquire(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	const n = 16
	winners, errs := raceAcquire(e, n, clk, false)
	if len(winners) != 1 {
		t.Fatalf("%d of %d concurrent acquirers won, want exactly 1 (errors: %v)", len(winners), n, errs)
	}
	for _, err := range errs {
		wantLeased(t, err)
	}
	checkHolder(t, e.a, "w", winners[0].Info().Holder, 1)
}

func testLeaseConcurrentTakeover(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	acquire(t, e.a, "w", holder("dead", 1), clk, false)
	clk.Add(leaseTTL + chunkstore.LeaseGrace + time.Second)
	const n = 16
	winners, errs := raceAcquire(e, n, clk, true)
	if len(winners) != 1 {
		t.Fatalf("%d of %d concurrent forced takeovers won, want exactly 1 (errors: %v)", len(winners), n, errs)
	}
	for _, err := range errs {
		// The losers see the winner's live lease.
		wantLeased(t, err, "only an expired lease")
	}
	checkHolder(t, e.b, "w", winners[0].Info().Holder, 2)
}

// raceAcquire runs n acquirers of workspace w at once, through both
// stores, and returns the leases won and the errors of the others.
func raceAcquire(e *leaseEnv, n int, clk *leaseClock, force bool) ([]*chunkstore.Lease, []error) {
	var (
		mu      sync.Mutex
		winners []*chunkstore.Lease
		errs    []error
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	for i := range n {
		s := e.a
		if i%2 == 1 {
			s = e.b
		}
		wg.Go(func() {
			<-start
			l, err := s.AcquireLease(ctx, "w", holder(fmt.Sprint(i), 1000+i), chunkstore.LeaseOptions{TTL: leaseTTL, Force: force, Now: clk.Now})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				winners = append(winners, l)
			}
		})
	}
	close(start)
	wg.Wait()
	return winners, errs
}

// validLease returns the bytes of a real lease object of workspace w.
func validLease(t testing.TB, s *chunkstore.Store, be backend.Backend) []byte {
	t.Helper()
	clk := newLeaseClock()
	if _, err := s.AcquireLease(ctx, "w", holder("a", 101), chunkstore.LeaseOptions{Now: clk.Now}); err != nil {
		t.Fatal(err)
	}
	data, err := backend.ReadAll(ctx, be, "leases/w")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func testLeaseCorrupt(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	clk := newLeaseClock()
	valid := string(validLease(t, e.a, e.raw))
	for _, tc := range []struct {
		name, data string
		want       error
		says       string
	}{
		{"Garbage", "\x00\x01not json", chunkstore.ErrCorrupt, "leases/w"},
		{"Truncated", valid[:len(valid)/2], chunkstore.ErrCorrupt, "leases/w"},
		{"UnknownField", strings.Replace(valid, `"nonce"`, `"extra":1,"nonce"`, 1), chunkstore.ErrCorrupt, "extra"},
		{"TrailingData", valid + "{}", chunkstore.ErrCorrupt, "after the JSON"},
		{"OtherWorkspace", strings.Replace(valid, `"workspace":"w"`, `"workspace":"v"`, 1), chunkstore.ErrCorrupt, `names workspace "v"`},
		{"NoHolder", strings.Replace(valid, `"id":"id-a"`, `"id":""`, 1), chunkstore.ErrCorrupt, "holder ID"},
		{"ControlInHost", strings.Replace(valid, `"host":"host-a"`, `"host":"host-\u001b[2J"`, 1), chunkstore.ErrCorrupt, "holder host"},
		{"Generation0", strings.Replace(valid, `"generation":1`, `"generation":0`, 1), chunkstore.ErrCorrupt, "generation 0"},
		{"TimesOutOfOrder", strings.Replace(valid, `"expires":"2026-05-01T12:00:30Z"`, `"expires":"2026-05-01T11:00:00Z"`, 1), chunkstore.ErrCorrupt, "out of order"},
		{"Version0", strings.Replace(valid, `"version":1`, `"version":0`, 1), chunkstore.ErrCorrupt, "version 0"},
		{"Version2", strings.Replace(valid, `"version":1`, `"version":2`, 1), chunkstore.ErrVersion, "upgrade cairn"},
		{"Version2NewFields", `{"version":2,"shape":"new"}`, chunkstore.ErrVersion, "newer cairn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.data == valid {
				t.Fatal("test case did not change the lease")
			}
			if _, err := e.raw.Put(ctx, "leases/w", strings.NewReader(tc.data), backend.Condition{}); err != nil {
				t.Fatal(err)
			}
			_, err := e.a.Lease(ctx, "w")
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Lease: err = %v, want %v saying %q", err, tc.want, tc.says)
			}
			// Not forced, no acquirer replaces it; forced, only a corrupt
			// one (a newer cairn's lease is never overwritten).
			_, err = e.b.AcquireLease(ctx, "w", holder("b", 202), chunkstore.LeaseOptions{Now: clk.Now})
			if !errors.Is(err, tc.want) || errors.Is(err, chunkstore.ErrCorrupt) && !strings.Contains(err.Error(), "--force to replace it") {
				t.Fatalf("AcquireLease: err = %v, want %v with a hint", err, tc.want)
			}
			l, err := e.b.AcquireLease(ctx, "w", holder("b", 202), chunkstore.LeaseOptions{Now: clk.Now, Force: true})
			if tc.want == chunkstore.ErrVersion {
				if !errors.Is(err, chunkstore.ErrVersion) {
					t.Fatalf("forced AcquireLease over a newer lease: err = %v, want ErrVersion", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("forced AcquireLease over a corrupt lease: %v", err)
			}
			checkHolder(t, e.a, "w", holder("b", 202), 1)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func testLeaseInvalid(t *testing.T, newEnv newEnv) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name string
		ws   string
		h    chunkstore.LeaseHolder
		opts chunkstore.LeaseOptions
	}{
		{"Workspace", "../w", holder("a", 1), chunkstore.LeaseOptions{}},
		{"NoID", "w", chunkstore.LeaseHolder{Host: "h"}, chunkstore.LeaseOptions{}},
		{"IDChars", "w", chunkstore.LeaseHolder{ID: "a b", Host: "h"}, chunkstore.LeaseOptions{}},
		{"NoHost", "w", chunkstore.LeaseHolder{ID: "x"}, chunkstore.LeaseOptions{}},
		{"ControlInDescription", "w", chunkstore.LeaseHolder{ID: "x", Host: "h", Description: "a\nb"}, chunkstore.LeaseOptions{}},
		{"ShortTTL", "w", holder("a", 1), chunkstore.LeaseOptions{TTL: 100 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.a.AcquireLease(ctx, tc.ws, tc.h, tc.opts); !errors.Is(err, chunkstore.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := e.a.Lease(ctx, "-w"); !errors.Is(err, chunkstore.ErrInvalid) {
		t.Fatalf("Lease of a bad name: %v", err)
	}
}

// The default options and the real clock, and NewLeaseHolder.
func TestLease_Defaults(t *testing.T) {
	s := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
	h := chunkstore.NewLeaseHolder("", "test")
	if err := h.Validate(); err != nil || len(h.ID) != 32 || h.PID <= 0 || h.Host == "" {
		t.Fatalf("NewLeaseHolder = %+v, %v", h, err)
	}
	if h2 := chunkstore.NewLeaseHolder("", "test"); h2.ID == h.ID {
		t.Fatal("two fresh holder IDs are equal")
	}
	before := time.Now()
	l, err := s.AcquireLease(ctx, "w", h, chunkstore.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info := l.Info(); l.TTL() != chunkstore.DefaultLeaseTTL || info.Expires.Before(before.Add(chunkstore.DefaultLeaseTTL)) {
		t.Fatalf("default TTL: %v, expires %v", l.TTL(), info.Expires)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.String(); !strings.Contains(got, h.Host) || !strings.Contains(got, fmt.Sprintf("pid %d, test", h.PID)) {
		t.Fatalf("String = %q", got)
	}
}

// Any bytes in a lease object: a lease or a clear error, never a panic.
func FuzzLease(f *testing.F) {
	be := chunkstoretest.LocalBackend(f)
	s := chunkstoretest.NewStore(f, be, chunkstore.InitOptions{}, chunkstore.Options{})
	valid := validLease(f, s, be)
	f.Add(valid)
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{}`))
	f.Add(bytes.Replace(valid, []byte(`"pid":101`), []byte(`"pid":-1`), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := be.Put(ctx, "leases/w", bytes.NewReader(data), backend.Condition{}); err != nil {
			t.Fatal(err)
		}
		info, err := s.Lease(ctx, "w")
		if err != nil {
			if !errors.Is(err, chunkstore.ErrCorrupt) && !errors.Is(err, chunkstore.ErrVersion) {
				t.Fatalf("err = %v, want ErrCorrupt or ErrVersion", err)
			}
			return
		}
		if info.Workspace != "w" || info.Generation == 0 || info.Holder.Validate() != nil || !info.Expires.After(info.Renewed) {
			t.Fatalf("decoded an invalid lease: %+v", info)
		}
	})
}
