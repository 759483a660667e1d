package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
)

// LeaseIDFile is the file in a workspace's state directory
// (HOME/workspaces/WS/lease-holder) that keeps the daemon's lease holder ID
// across restarts, so that a daemon restarted after a crash re-acquires
// its own lease at once instead of waiting for it to expire.
const LeaseIDFile = "lease-holder"

// Lease states, as LeaseStatus.State reports them.
const (
	LeaseHeld     = "held"     // renewed on time
	LeaseRetrying = "retrying" // the last renewal failed (the store unreachable?); still ours, retrying
	LeaseExpired  = "expired"  // past its expiry without a renewal: another mount may take it over; retrying
	LeaseLost     = "lost"     // taken over by another mount: stop serving writes
	LeaseReleased = "released" // given up by Close
)

// LeaseConfig configures OpenLease.
type LeaseConfig struct {
	// Store is the workspace's store. Required.
	Store *chunkstore.Store
	// Workspace is the workspace to lease. Required.
	Workspace string
	// Home is the state directory: the holder ID is kept in
	// HOME/workspaces/WS/lease-holder (LeaseIDFile). Empty: a fresh holder
	// ID, so the lease of an earlier run must expire before this one can
	// take it (with Force).
	Home string
	// Description tells people who find the workspace leased what holds
	// it, e.g. "mount /work/api". Optional; at most 1024 bytes.
	Description string
	// TTL is how long the lease lasts without renewal; it is renewed every
	// TTL/3. Default chunkstore.DefaultLeaseTTL (30 s); at least
	// chunkstore.MinLeaseTTL (1 s).
	TTL time.Duration
	// Force takes over an expired lease of another holder (`cairn mount
	// --force`). A live lease is never taken over.
	Force bool
	// OnLost is called once, from the renewal goroutine, when the lease is
	// found taken over by another mount (an error wrapping
	// chunkstore.ErrLeased that names the new holder): the daemon must
	// stop serving writes. It is not called once Close has begun. It may
	// call Close. Optional: Lost and Err say the same.
	OnLost func(error)
	// Logf logs renewal failures, recoveries and the loss. Default: none.
	Logf func(format string, args ...any)

	// Test hooks: the clock and its timers.
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
}

// LeaseStatus is a held lease's state, for `cairn status`.
type LeaseStatus struct {
	Workspace  string                 `json:"workspace"`
	Holder     chunkstore.LeaseHolder `json:"holder"`
	Generation uint64                 `json:"generation"`
	Acquired   time.Time              `json:"acquired"`
	Renewed    time.Time              `json:"renewed"` // last successful renewal
	Expires    time.Time              `json:"expires"` // as written at that renewal
	// State is LeaseHeld, LeaseRetrying, LeaseExpired, LeaseLost or
	// LeaseReleased.
	State       string    `json:"state"`
	Failures    int       `json:"failures,omitempty"`   // renewals failed in a row
	LastError   string    `json:"last_error,omitempty"` // why the last renewal failed, or how the lease was lost
	LastAttempt time.Time `json:"last_attempt,omitzero"`
}

// LeaseKeeper holds a workspace's lease for a running daemon: it renews it
// in the background every TTL/3, retries (with backoff, for as long as it
// takes) while the store cannot be reached, reports a loss through
// LeaseConfig.OnLost and Lost, and releases the lease at Close. Safe for
// concurrent use.
type LeaseKeeper struct {
	cfg    LeaseConfig
	lease  *chunkstore.Lease
	cancel context.CancelFunc
	done   chan struct{} // closed when the renewal goroutine has returned
	lost   chan struct{} // closed when the lease is lost

	mu          sync.Mutex // guards what follows
	failures    int
	lastErr     error
	lastAttempt time.Time
	lostErr     error
	released    bool

	closeOnce sync.Once
	closeErr  error
}

// OpenLease acquires the workspace's lease (see chunkstore.AcquireLease:
// a live lease of another mount is an error wrapping chunkstore.ErrLeased
// that names the holder and the expiry and says what to do) and starts
// renewing it. ctx bounds the acquisition only. Close the keeper to release
// the lease.
func OpenLease(ctx context.Context, cfg LeaseConfig) (*LeaseKeeper, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: OpenLease needs a store", chunkstore.ErrInvalid)
	}
	if err := chunkstore.ValidWorkspaceName(cfg.Workspace); err != nil {
		return nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = chunkstore.DefaultLeaseTTL
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	var id string
	if cfg.Home != "" {
		var err error
		if id, err = loadHolderID(filepath.Join(PathsOf(cfg.Home, cfg.Workspace).Dir, LeaseIDFile)); err != nil {
			return nil, err
		}
	}
	holder := chunkstore.NewLeaseHolder(id, cfg.Description)
	lease, err := cfg.Store.AcquireLease(ctx, cfg.Workspace, holder, chunkstore.LeaseOptions{TTL: cfg.TTL, Force: cfg.Force, Now: cfg.now})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	k := &LeaseKeeper{cfg: cfg, lease: lease, cancel: cancel, done: make(chan struct{}), lost: make(chan struct{})}
	go k.run(rctx)
	return k, nil
}

// Lost is closed when the lease is found taken over by another mount.
func (k *LeaseKeeper) Lost() <-chan struct{} { return k.lost }

// Err returns why the lease was lost (wrapping chunkstore.ErrLeased), or
// nil while it is ours.
func (k *LeaseKeeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lostErr
}

// Status returns the lease's state.
func (k *LeaseKeeper) Status() LeaseStatus {
	info := k.lease.Info()
	now := k.cfg.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	st := LeaseStatus{
		Workspace: info.Workspace, Holder: info.Holder, Generation: info.Generation,
		Acquired: info.Acquired, Renewed: info.Renewed, Expires: info.Expires,
		State: LeaseHeld, Failures: k.failures, LastAttempt: k.lastAttempt,
	}
	if k.lastErr != nil {
		st.LastError = k.lastErr.Error()
	}
	switch {
	case k.lostErr != nil:
		st.State, st.LastError = LeaseLost, k.lostErr.Error()
	case k.released:
		st.State = LeaseReleased
	case now.After(info.Expires):
		// By our clock; others wait chunkstore.LeaseGrace longer.
		st.State = LeaseExpired
	case k.failures > 0:
		st.State = LeaseRetrying
	}
	return st
}

// Close stops renewing and releases the lease (chunkstore.Lease.Release:
// its object is deleted if it is still ours), so that the workspace can be
// mounted elsewhere at once. A lost lease is left alone: Close returns nil,
// the loss having been reported already. If the store cannot be reached,
// Close returns the error and the lease expires by itself after its TTL.
// ctx bounds the release. Calling Close again returns the first result.
func (k *LeaseKeeper) Close(ctx context.Context) error {
	k.closeOnce.Do(func() {
		k.cancel()
		<-k.done
		err := k.lease.Release(ctx)
		if errors.Is(err, chunkstore.ErrLeased) {
			err = nil
		}
		if err == nil {
			k.mu.Lock()
			k.released = k.lostErr == nil
			k.mu.Unlock()
		}
		k.closeErr = err
	})
	return k.closeErr
}

// run renews the lease until ctx is cancelled (Close) or the lease is lost.
func (k *LeaseKeeper) run(ctx context.Context) {
	lost := k.renewLoop(ctx)
	close(k.done)
	if lost != nil && k.cfg.OnLost != nil && ctx.Err() == nil {
		k.cfg.OnLost(lost)
	}
}

func (k *LeaseKeeper) renewLoop(ctx context.Context) error {
	ws, ttl := k.cfg.Workspace, k.cfg.TTL
	wait := ttl / 3
	expiredLogged := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-k.cfg.after(wait):
		}
		// One attempt may not outlast the next: a hung request must not
		// keep the lease from being renewed in time.
		actx, cancel := context.WithTimeout(ctx, ttl/3)
		err := k.lease.Renew(actx)
		cancel()
		if ctx.Err() != nil {
			return nil // closing: Close releases the lease
		}
		now := k.cfg.now()
		k.mu.Lock()
		k.lastAttempt = now
		failures := k.failures
		switch {
		case err == nil:
			k.failures, k.lastErr = 0, nil
		case errors.Is(err, chunkstore.ErrLeased):
			k.lostErr = err
		default:
			k.failures++
			k.lastErr = err
		}
		k.mu.Unlock()

		switch {
		case err == nil:
			if failures > 0 {
				k.cfg.Logf("cairn: lease of %q renewed again after %d failed attempts", ws, failures)
			}
			wait, expiredLogged = ttl/3, false
		case errors.Is(err, chunkstore.ErrLeased):
			k.cfg.Logf("cairn: %v", err)
			close(k.lost)
			return err
		default:
			expires := k.lease.Info().Expires
			switch {
			case now.After(expires) && !expiredLogged:
				k.cfg.Logf("cairn: the lease of %q expired at %s without a renewal (%v); another mount may take the workspace over with --force after %s; still retrying",
					ws, expires.UTC().Format(time.RFC3339), err, expires.Add(chunkstore.LeaseGrace).UTC().Format(time.RFC3339))
				expiredLogged = true
			case failures == 0:
				k.cfg.Logf("cairn: renewing the lease of %q failed (%v); retrying: it holds until %s", ws, err, expires.UTC().Format(time.RFC3339))
			}
			wait = retryWait(ttl, failures+1)
		}
	}
}

// retryWait is the wait before retry n (1, 2, ...) of a failed renewal:
// TTL/30 doubling, at most TTL/6, so that several attempts fit before the
// lease expires (for a 30 s TTL: 1, 2, 4, 5, 5... seconds).
func retryWait(ttl time.Duration, n int) time.Duration {
	w, ceil := ttl/30, ttl/6
	for i := 1; i < n && w < ceil; i++ {
		w *= 2
	}
	return min(w, ceil)
}

// loadHolderID reads the holder ID kept in path, or creates the file with
// a fresh one (also when its content is not a valid ID).
func loadHolderID(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if (chunkstore.LeaseHolder{ID: id, Host: "h"}).Validate() == nil {
			return id, nil
		}
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("read the lease holder ID: %w", err)
	}
	id := chunkstore.NewLeaseHolderID()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("keep the lease holder ID: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep the lease holder ID: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("keep the lease holder ID: %w", err)
	}
	return id, nil
}
