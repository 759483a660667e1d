package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

// fakeClock drives a LeaseKeeper's renewal loop step by step: every timer
// the loop sets is announced on armed, and Advance fires the timers due.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	armed  chan time.Duration
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), armed: make(chan time.Duration, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	t := fakeTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	c.armed <- d
	return t.ch
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

// waitArmed waits until the loop sets its next timer (it has finished the
// previous renewal then) and returns the timer's duration.
func (c *fakeClock) waitArmed(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.armed:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("the renewal loop did not set its next timer")
		return 0
	}
}

// step fires the loop's pending timer and waits for it to set the next
// one, returning the next one's duration.
func (c *fakeClock) step(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	c.Advance(d)
	return c.waitArmed(t)
}

const testTTL = 30 * time.Second

// machine is one daemon's view: its own store handle on the shared
// location, its state directory, its clock.
type machine struct {
	store *chunkstore.Store
	home  string
	clk   *fakeClock
	logs  *logBuf
}

type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func newMachine(t *testing.T, be backend.Backend) *machine {
	t.Helper()
	s, err := chunkstore.Open(context.Background(), be, chunkstore.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &machine{store: s, home: t.TempDir(), clk: newFakeClock(), logs: &logBuf{}}
}

func (m *machine) config(desc string, force bool, onLost func(error)) LeaseConfig {
	return LeaseConfig{Store: m.store, Workspace: "w", Home: m.home, Description: desc, TTL: testTTL, Force: force,
		OnLost: onLost, Logf: m.logs.Logf, now: m.clk.Now, after: m.clk.After}
}

func (m *machine) open(t *testing.T, desc string, onLost func(error)) *LeaseKeeper {
	t.Helper()
	k, err := OpenLease(context.Background(), m.config(desc, false, onLost))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close(context.Background()) })
	if d := m.clk.waitArmed(t); d != testTTL/3 {
		t.Fatalf("first renewal in %v, want TTL/3 = %v", d, testTTL/3)
	}
	return k
}

// localStore initialises a store in a temporary directory and returns a
// function that opens another backend on it (another machine's client).
func localStore(t *testing.T) func() backend.Backend {
	be := chunkstoretest.LocalBackend(t)
	if _, err := chunkstore.Init(context.Background(), be, chunkstore.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() backend.Backend {
		b, err := local.Open(be.Root(), local.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}

func checkState(t *testing.T, k *LeaseKeeper, state string, failures int) LeaseStatus {
	t.Helper()
	st := k.Status()
	if st.State != state || st.Failures != failures {
		t.Fatalf("status = %s with %d failures (last error %q), want %s with %d", st.State, st.Failures, st.LastError, state, failures)
	}
	return st
}

func TestLeaseKeeper_RenewsAndReleases(t *testing.T) {
	another := localStore(t)
	m := newMachine(t, another())
	k := m.open(t, "mount /work/a", nil)
	t0 := m.clk.Now()
	st := checkState(t, k, LeaseHeld, 0)
	if st.Workspace != "w" || st.Generation != 1 || !st.Acquired.Equal(t0) || !st.Expires.Equal(t0.Add(testTTL)) ||
		st.Holder.Description != "mount /work/a" || st.Holder.PID != os.Getpid() {
		t.Fatalf("status after open = %+v", st)
	}
	for i := 1; i <= 3; i++ {
		if next := m.clk.step(t, testTTL/3); next != testTTL/3 {
			t.Fatalf("next renewal in %v, want %v", next, testTTL/3)
		}
		now := m.clk.Now()
		st := checkState(t, k, LeaseHeld, 0)
		if !st.Renewed.Equal(now) || !st.Expires.Equal(now.Add(testTTL)) || !st.LastAttempt.Equal(now) {
			t.Fatalf("renewal %d: status %+v, want renewed at %v", i, st, now)
		}
		info, err := m.store.Lease(context.Background(), "w")
		if err != nil || !info.Expires.Equal(st.Expires) || info.Generation != 1 {
			t.Fatalf("stored lease after renewal %d: %+v, %v", i, info, err)
		}
	}
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkState(t, k, LeaseReleased, 0)
	if _, err := m.store.Lease(context.Background(), "w"); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Fatalf("lease after Close: %v, want ErrNotFound", err)
	}
	if err := k.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-k.Lost():
		t.Fatal("a released lease reported lost")
	default:
	}
}

func TestLeaseKeeper_SecondMountRefused(t *testing.T) {
	another := localStore(t)
	a, b := newMachine(t, another()), newMachine(t, another())
	a.open(t, "mount /work/a", nil)
	b.clk.Advance(5 * time.Second)
	for _, force := range []bool{false, true} {
		_, err := OpenLease(context.Background(), b.config("mount /work/b", force, nil))
		if !errors.Is(err, chunkstore.ErrLeased) || !errors.Is(err, chunkstore.ErrConflict) {
			t.Fatalf("second mount (force=%v): err = %v, want ErrLeased", force, err)
		}
		host, _ := os.Hostname()
		for _, want := range []string{host, fmt.Sprintf("pid %d", os.Getpid()), "mount /work/a", "until 2026-05-01 12:00:30 UTC (in 25s)", "--force"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	}
	// The two state directories have their own holder IDs.
	ida, err := os.ReadFile(filepath.Join(PathsOf(a.home, "w").Dir, LeaseIDFile))
	if err != nil {
		t.Fatal(err)
	}
	idb, err := os.ReadFile(filepath.Join(PathsOf(b.home, "w").Dir, LeaseIDFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(ida) == string(idb) {
		t.Fatal("two state directories share a holder ID")
	}
}

// A restarted daemon (same state directory) re-acquires the lease at once;
// the old one, still running, finds its lease lost.
func TestLeaseKeeper_RestartReacquires(t *testing.T) {
	another := localStore(t)
	a := newMachine(t, another())
	lostCh := make(chan error, 1)
	old := a.open(t, "mount /work/a", func(err error) { lostCh <- err })

	restarted := newMachine(t, another())
	restarted.home = a.home
	restarted.clk.Advance(time.Second)
	k := restarted.open(t, "mount /work/a", nil)
	if st := checkState(t, k, LeaseHeld, 0); st.Generation != 2 {
		t.Fatalf("re-acquired generation %d, want 2", st.Generation)
	}

	a.clk.Advance(testTTL / 3) // the old daemon's renewal
	var err error
	select {
	case err = <-lostCh:
	case <-time.After(30 * time.Second):
		t.Fatal("OnLost not called")
	}
	<-old.Lost()
	if !errors.Is(err, chunkstore.ErrLeased) || !strings.Contains(err.Error(), "same holder ID") || old.Err() != err {
		t.Fatalf("loss: %v (Err %v)", err, old.Err())
	}
	checkState(t, old, LeaseLost, 0)
	if !strings.Contains(a.logs.String(), "lost") {
		t.Fatalf("the loss was not logged: %q", a.logs)
	}
	// Closing the old keeper leaves the new lease alone.
	if err := old.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkState(t, old, LeaseLost, 0)
	if info, err := a.store.Lease(context.Background(), "w"); err != nil || info.Generation != 2 {
		t.Fatalf("lease after the old keeper's Close: %+v, %v", info, err)
	}
	// The new one still renews.
	restarted.clk.step(t, testTTL/3)
	checkState(t, k, LeaseHeld, 0)
}

// A daemon cut off from the store keeps retrying and keeps its lease; once
// it expired, another machine can take it over with --force, and the
// first finds out when the store answers again.
func TestLeaseKeeper_StoreUnreachable(t *testing.T) {
	another := localStore(t)
	faulty := chunkstoretest.NewFaulty(another())
	a, b := newMachine(t, faulty), newMachine(t, another())
	lostCh := make(chan error, 1)
	k := a.open(t, "mount /work/a", func(err error) { lostCh <- err })

	faulty.Fail(chunkstoretest.OpPut, "leases/", -1, fmt.Errorf("dial tcp: connection refused: %w", backend.ErrUnavailable))
	wait := a.clk.step(t, testTTL/3)
	st := checkState(t, k, LeaseRetrying, 1)
	if wait != testTTL/30 || !strings.Contains(st.LastError, "unavailable") {
		t.Fatalf("after a failed renewal: retry in %v, status %+v", wait, st)
	}
	// Retries back off, up to TTL/6; past the expiry the state says so.
	var waits []time.Duration
	for n := 2; a.clk.Now().Before(k.Status().Expires.Add(time.Second)); n++ {
		waits = append(waits, wait)
		wait = a.clk.step(t, wait)
		checkState(t, k, map[bool]string{false: LeaseRetrying, true: LeaseExpired}[a.clk.Now().After(k.Status().Expires)], n)
	}
	if want := []time.Duration{1, 2, 4, 5, 5}; len(waits) < len(want) || fmt.Sprint(waits[:5]) != fmt.Sprint(scale(want, time.Second)) {
		t.Fatalf("retry waits %v, want %v then 5s", waits, scale(want, time.Second))
	}
	if logs := a.logs.String(); !strings.Contains(logs, "failed") || !strings.Contains(logs, "expired at") {
		t.Fatalf("logs do not report the failure and the expiry: %q", logs)
	}
	select {
	case <-k.Lost():
		t.Fatal("an unreachable store made the lease lost")
	default:
	}

	// The store answers again: the lease is ours still.
	faulty.Heal()
	if next := a.clk.step(t, wait); next != testTTL/3 {
		t.Fatalf("after recovery: next renewal in %v, want %v", next, testTTL/3)
	}
	st = checkState(t, k, LeaseHeld, 0)
	if !st.Expires.Equal(a.clk.Now().Add(testTTL)) || st.LastError != "" || !strings.Contains(a.logs.String(), "renewed again") {
		t.Fatalf("after recovery: %+v, logs %q", st, a.logs)
	}

	// Cut off again, long enough for machine b to take over.
	faulty.Fail(chunkstoretest.OpPut, "leases/", -1, backend.ErrUnavailable)
	b.clk.Advance(a.clk.Now().Add(testTTL + chunkstore.LeaseGrace + time.Second).Sub(b.clk.Now()))
	if _, err := OpenLease(context.Background(), b.config("mount /work/b", false, nil)); !errors.Is(err, chunkstore.ErrLeased) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("takeover without --force: %v", err)
	}
	kb, err := OpenLease(context.Background(), b.config("mount /work/b", true, nil))
	if err != nil {
		t.Fatalf("takeover with --force after expiry: %v", err)
	}
	defer kb.Close(context.Background())
	faulty.Heal()
	a.clk.Advance(testTTL / 3)
	select {
	case err = <-lostCh:
	case <-time.After(30 * time.Second):
		t.Fatal("OnLost not called")
	}
	if !errors.Is(err, chunkstore.ErrLeased) || !strings.Contains(err.Error(), "mount /work/b") {
		t.Fatalf("loss: %v", err)
	}
	checkState(t, k, LeaseLost, 0)
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if info, err := b.store.Lease(context.Background(), "w"); err != nil || info.Holder.Description != "mount /work/b" {
		t.Fatalf("b's lease after a's Close: %+v, %v", info, err)
	}
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d * unit
	}
	return out
}

// The same on a real S3 server that goes away and comes back.
func TestLeaseKeeper_S3Outage(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	be := srv.Backend(t, bucket, "store")
	if _, err := chunkstore.Init(context.Background(), be, chunkstore.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	m := newMachine(t, be)
	k := m.open(t, "mount /work/a", nil)
	m.clk.step(t, testTTL/3)
	checkState(t, k, LeaseHeld, 0)

	srv.Stop(t)
	wait := m.clk.step(t, testTTL/3)
	st := checkState(t, k, LeaseRetrying, 1)
	t.Logf("renewal with the server down: %s", st.LastError)
	wait = m.clk.step(t, wait)
	checkState(t, k, LeaseRetrying, 2)

	srv.Restart(t)
	m.clk.step(t, wait)
	st = checkState(t, k, LeaseHeld, 0)
	info, err := m.store.Lease(context.Background(), "w")
	if err != nil || !info.Expires.Equal(st.Expires) {
		t.Fatalf("stored lease after the outage: %+v, %v", info, err)
	}
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.store.Lease(context.Background(), "w"); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Fatalf("lease after Close: %v", err)
	}
}

// The real clock and timers, with the shortest TTL: renewals happen. No
// timing is asserted beyond a generous deadline.
func TestLeaseKeeper_RealClock(t *testing.T) {
	s := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
	k, err := OpenLease(context.Background(), LeaseConfig{Store: s, Workspace: "w", TTL: chunkstore.MinLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	first := k.Status().Renewed
	deadline := time.Now().Add(30 * time.Second)
	for !k.Status().Renewed.After(first) {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal in 30s with a 1s TTL: %+v", k.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lease(context.Background(), "w"); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Fatalf("lease after Close: %v", err)
	}
}

func TestLeaseKeeper_HolderIDFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workspaces", "w", LeaseIDFile)
	id, err := loadHolderID(path)
	if err != nil || len(id) != 32 {
		t.Fatalf("new holder ID %q, %v", id, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("holder ID file: %v, %v", fi, err)
	}
	if again, err := loadHolderID(path); err != nil || again != id {
		t.Fatalf("holder ID read again = %q, %v; want %q", again, err, id)
	}
	// Garbage is replaced by a fresh ID.
	if err := os.WriteFile(path, []byte("not an id\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fresh, err := loadHolderID(path); err != nil || fresh == id || len(fresh) != 32 {
		t.Fatalf("holder ID after garbage = %q, %v", fresh, err)
	}
	// Bad configurations.
	if _, err := OpenLease(context.Background(), LeaseConfig{Workspace: "w"}); !errors.Is(err, chunkstore.ErrInvalid) {
		t.Fatalf("no store: %v", err)
	}
	s := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
	if _, err := OpenLease(context.Background(), LeaseConfig{Store: s, Workspace: "w", TTL: time.Millisecond}); !errors.Is(err, chunkstore.ErrInvalid) {
		t.Fatalf("1ms TTL: %v", err)
	}
}

func TestRetryWait(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, retryWait(30*time.Second, n))
	}
	if want := scale([]time.Duration{1, 2, 4, 5, 5, 5}, time.Second); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("retryWait = %v, want %v", got, want)
	}
}
