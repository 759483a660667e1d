package chunkstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// Leases: a mount holds a lease on its workspace, so that two machines
// never serve one workspace at once by accident. The lease is the object
// leases/<workspace>, JSON:
//
//	{"version":1,"workspace":"api",
//	 "holder":{"id":"9f0c…","host":"host-b","pid":4242,"description":"mount /work/api"},
//	 "nonce":"5d1e…","generation":3,
//	 "acquired":"2026-05-01T12:02:10Z","renewed":"2026-05-01T12:02:40Z","expires":"2026-05-01T12:03:10Z"}
//
// The holder renews it (every TTL/3 in the daemon) and deletes it when it
// unmounts. Every write is a compare-and-swap on the object's ETag, so of
// two machines that race for a lease exactly one wins, and a holder whose
// lease was taken over finds out at its next renewal.
//
// Clocks. Expiry compares a time written by the holder's clock with the
// reader's clock. cairn assumes the clocks of the machines sharing a store
// differ by less than LeaseGrace (NTP keeps them within milliseconds), and
// treats a lease as expired only LeaseGrace after its expiry time. The
// holder, for its part, must consider its lease at risk from the expiry
// time on by its own clock. If the assumption fails, two mounts may both
// believe they hold a workspace; the ref's compare-and-swap still keeps
// them from both moving it (the loser's snapshot is kept and reported).

// leaseVersion is the format version of lease objects.
const leaseVersion = 1

const (
	// DefaultLeaseTTL is how long a lease lasts without renewal unless
	// LeaseOptions.TTL says otherwise.
	DefaultLeaseTTL = 30 * time.Second
	// MinLeaseTTL is the shortest TTL AcquireLease takes.
	MinLeaseTTL = time.Second
	// LeaseGrace is the largest clock difference between machines that
	// leases tolerate: a lease counts as expired only LeaseGrace after the
	// expiry time its holder wrote.
	LeaseGrace = 10 * time.Second
)

// Limits on the holder's strings, checked when writing and when reading.
const (
	leaseIDMax   = 64
	leaseHostMax = 255
	leaseDescMax = 1024
)

// LeaseHolder identifies who holds a lease. ID and Host together are the
// holder's identity: a holder that finds a lease with its own ID and host
// re-acquires it at once (a daemon restarted after a crash, which keeps
// its ID in its state directory). PID and Description are for people.
type LeaseHolder struct {
	// ID is random (NewLeaseHolderID) and stable across restarts of the
	// same mount: 1 to 64 letters, digits, '-' or '_'.
	ID string `json:"id"`
	// Host is the holder's host name (os.Hostname).
	Host string `json:"host"`
	// PID is the holder's process ID.
	PID int `json:"pid"`
	// Description says what holds the lease, e.g. "mount /work/api (state
	// /var/lib/cairn)". Optional; at most 1024 bytes.
	Description string `json:"description,omitempty"`
}

// NewLeaseHolderID returns a fresh random holder ID (32 hex digits).
func NewLeaseHolderID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b[:])
}

// NewLeaseHolder describes this process: the given ID (a fresh one if
// empty), the host name and the process ID.
func NewLeaseHolder(id, description string) LeaseHolder {
	if id == "" {
		id = NewLeaseHolderID()
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return LeaseHolder{ID: id, Host: host, PID: os.Getpid(), Description: description}
}

// Validate checks the holder's fields. The error wraps ErrInvalid.
func (h LeaseHolder) Validate() error {
	if err := h.check(); err != nil {
		return fmt.Errorf("%w: lease holder: %v", ErrInvalid, err)
	}
	return nil
}

func (h LeaseHolder) check() error {
	if h.ID == "" || len(h.ID) > leaseIDMax {
		return fmt.Errorf("holder ID %q: must be 1 to %d bytes", h.ID, leaseIDMax)
	}
	for _, c := range []byte(h.ID) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("holder ID %q: only letters, digits, '-' and '_'", h.ID)
		}
	}
	if h.Host == "" || len(h.Host) > leaseHostMax || !printable(h.Host) {
		return fmt.Errorf("holder host %q: must be 1 to %d printable bytes", h.Host, leaseHostMax)
	}
	if h.PID < 0 {
		return fmt.Errorf("holder pid %d is negative", h.PID)
	}
	if len(h.Description) > leaseDescMax || !printable(h.Description) {
		return fmt.Errorf("holder description: must be at most %d bytes of printable UTF-8", leaseDescMax)
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters,
// so that what a lease says about its holder is safe to print on a terminal.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// Same reports whether h and o are the same holder: same ID on the same
// host.
func (h LeaseHolder) Same(o LeaseHolder) bool { return h.ID == o.ID && h.Host == o.Host }

// String describes the holder for people: `host-b (pid 4242, mount /work/api)`.
func (h LeaseHolder) String() string {
	s := fmt.Sprintf("%s (pid %d", h.Host, h.PID)
	if h.Description != "" {
		s += ", " + h.Description
	}
	return s + ")"
}

// LeaseInfo is a lease as stored: who holds it and until when. Times are
// the holder's clock.
type LeaseInfo struct {
	Workspace string      `json:"workspace"`
	Holder    LeaseHolder `json:"holder"`
	// Generation counts acquisitions of the lease object: 1 when it is
	// created, one more at every takeover or re-acquisition; renewals
	// keep it. A released (deleted) or replaced corrupt lease starts again
	// at 1.
	Generation uint64    `json:"generation"`
	Acquired   time.Time `json:"acquired"`
	Renewed    time.Time `json:"renewed"` // last renewal (Acquired until the first)
	Expires    time.Time `json:"expires"`
}

// TakeoverAfter is when the lease counts as expired for everyone else: its
// expiry plus LeaseGrace for clock differences.
func (i *LeaseInfo) TakeoverAfter() time.Time { return i.Expires.Add(LeaseGrace) }

// Expired reports whether, at now (the reader's clock), the lease may be
// taken over: now is past TakeoverAfter.
func (i *LeaseInfo) Expired(now time.Time) bool { return now.After(i.TakeoverAfter()) }

// LeaseOptions tune AcquireLease. The zero value works.
type LeaseOptions struct {
	// TTL is how long the lease lasts without renewal. Default
	// DefaultLeaseTTL (30 s); at least MinLeaseTTL (1 s).
	TTL time.Duration
	// Force takes over a lease of another holder that has expired (see
	// LeaseInfo.Expired), or replaces a lease object that is corrupt.
	// It never takes over a live lease: that is refused with ErrLeased
	// whatever Force says.
	Force bool
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
}

// Validate checks the options. The error wraps ErrInvalid.
func (o LeaseOptions) Validate() error {
	if o.TTL != 0 && o.TTL < MinLeaseTTL {
		return fmt.Errorf("%w: lease TTL %v: must be at least %v", ErrInvalid, o.TTL, MinLeaseTTL)
	}
	return nil
}

func (o LeaseOptions) withDefaults() LeaseOptions {
	if o.TTL == 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Lease is a lease this process holds. Its methods are safe for concurrent
// use. It keeps working after the Store is closed, as long as the backend
// is open (so a daemon can release its lease after the final flush).
type Lease struct {
	s   *Store
	ttl time.Duration
	now func() time.Time

	op sync.Mutex // one Renew or Release at a time

	mu       sync.Mutex // guards what follows
	info     LeaseInfo
	nonce    string // random per acquisition: tells it from any other
	etag     string // the lease object's version as we last wrote it
	lost     error  // non-nil once the lease was found taken over
	released bool
}

// Info returns the lease as last written by this process.
func (l *Lease) Info() LeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// TTL returns the lease's time to live: Renew extends it by this much.
func (l *Lease) TTL() time.Duration { return l.ttl }

type leaseJSON struct {
	Version    int        `json:"version"`
	Workspace  string     `json:"workspace"`
	Holder     holderJSON `json:"holder"`
	Nonce      string     `json:"nonce"`
	Generation uint64     `json:"generation"`
	Acquired   time.Time  `json:"acquired"`
	Renewed    time.Time  `json:"renewed"`
	Expires    time.Time  `json:"expires"`
}

type holderJSON struct {
	ID          string `json:"id"`
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	Description string `json:"description,omitempty"`
}

func leaseKey(ws string) string { return "leases/" + ws }

func encodeLease(i *LeaseInfo, nonce string) ([]byte, error) {
	b, err := json.Marshal(leaseJSON{
		Version: leaseVersion, Workspace: i.Workspace, Holder: holderJSON(i.Holder),
		Nonce: nonce, Generation: i.Generation,
		Acquired: i.Acquired.UTC(), Renewed: i.Renewed.UTC(), Expires: i.Expires.UTC(),
	})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func decodeLease(data []byte) (*LeaseInfo, string, error) {
	newer := func(v int) error {
		return fmt.Errorf("%w: lease format version %d (this cairn reads %d): written by a newer cairn; upgrade cairn", ErrVersion, v, leaseVersion)
	}
	var j leaseJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		var probe struct {
			Version int `json:"version"`
		}
		if json.Unmarshal(data, &probe) == nil && probe.Version > leaseVersion {
			return nil, "", newer(probe.Version)
		}
		return nil, "", fmt.Errorf("%w: lease: %v", ErrCorrupt, err)
	}
	if dec.More() {
		return nil, "", fmt.Errorf("%w: lease: data after the JSON object", ErrCorrupt)
	}
	if j.Version != leaseVersion {
		if j.Version > leaseVersion {
			return nil, "", newer(j.Version)
		}
		return nil, "", fmt.Errorf("%w: lease format version %d", ErrCorrupt, j.Version)
	}
	if err := ValidWorkspaceName(j.Workspace); err != nil {
		return nil, "", fmt.Errorf("%w: lease: %v", ErrCorrupt, err)
	}
	h := LeaseHolder(j.Holder)
	if err := h.check(); err != nil {
		return nil, "", fmt.Errorf("%w: lease of %q: %v", ErrCorrupt, j.Workspace, err)
	}
	switch {
	case j.Nonce == "" || len(j.Nonce) > leaseIDMax:
		return nil, "", fmt.Errorf("%w: lease of %q: bad nonce", ErrCorrupt, j.Workspace)
	case j.Generation == 0:
		return nil, "", fmt.Errorf("%w: lease of %q: generation 0", ErrCorrupt, j.Workspace)
	case j.Acquired.IsZero() || j.Renewed.Before(j.Acquired) || !j.Expires.After(j.Renewed):
		return nil, "", fmt.Errorf("%w: lease of %q: times out of order (acquired %s, renewed %s, expires %s)", ErrCorrupt, j.Workspace,
			j.Acquired.Format(time.RFC3339Nano), j.Renewed.Format(time.RFC3339Nano), j.Expires.Format(time.RFC3339Nano))
	}
	return &LeaseInfo{Workspace: j.Workspace, Holder: h, Generation: j.Generation,
		Acquired: j.Acquired, Renewed: j.Renewed, Expires: j.Expires}, j.Nonce, nil
}

// storedLease is a lease object as read: its version (etag) and either its
// content or why the content does not decode.
type storedLease struct {
	etag  string
	info  *LeaseInfo
	nonce string
	bad   error // ErrCorrupt or ErrVersion; info is nil
}

// readLease reads the lease of ws with the ETag of exactly the bytes read
// (Stat, Get, Stat again, as Ref does). A missing lease is ErrNotFound.
// Bytes that do not decode are not an error here: st.bad says why.
func (s *Store) readLease(ctx context.Context, ws string) (*storedLease, error) {
	key := leaseKey(ws)
	for range 5 {
		info, err := s.be.Stat(ctx, key)
		if err != nil {
			if errors.Is(err, backend.ErrNotFound) {
				return nil, fmt.Errorf("%w: workspace %q has no lease: no mount holds it", ErrNotFound, ws)
			}
			return nil, fmt.Errorf("read the lease of %q: %w", ws, err)
		}
		data, err := backend.ReadAll(ctx, s.be, key)
		if errors.Is(err, backend.ErrNotFound) {
			continue // deleted in between
		}
		if err != nil {
			return nil, fmt.Errorf("read the lease of %q: %w", ws, err)
		}
		after, err := s.be.Stat(ctx, key)
		if err != nil || after.ETag != info.ETag {
			continue
		}
		st := &storedLease{etag: info.ETag}
		st.info, st.nonce, st.bad = decodeLease(data)
		if st.bad == nil && st.info.Workspace != ws {
			st.info, st.bad = nil, fmt.Errorf("%w: lease object for %q names workspace %q", ErrCorrupt, ws, st.info.Workspace)
		}
		if st.bad != nil {
			st.bad = fmt.Errorf("lease of %q (object %s): %w", ws, key, st.bad)
		}
		return st, nil
	}
	return nil, fmt.Errorf("%w: the lease of %q keeps changing while being read; retry", ErrConflict, ws)
}

// Lease reads a workspace's lease, for status displays: who holds it and
// until when (see LeaseInfo.Expired). A workspace no mount holds is
// ErrNotFound; a lease object that does not decode is ErrCorrupt, or
// ErrVersion if a newer cairn wrote it.
func (s *Store) Lease(ctx context.Context, workspace string) (*LeaseInfo, error) {
	if err := ValidWorkspaceName(workspace); err != nil {
		return nil, err
	}
	st, err := s.readLease(ctx, workspace)
	if err != nil {
		return nil, err
	}
	if st.bad != nil {
		return nil, st.bad
	}
	return st.info, nil
}

// AcquireLease acquires the lease of a workspace for holder:
//
//   - no lease: it is created (a conditional create: of racing acquirers
//     exactly one wins, the others get ErrLeased);
//   - a lease of the same holder (LeaseHolder.Same: a restarted daemon):
//     it is re-acquired at once, live or not, with the next generation;
//     a Lease value the earlier process still has then finds it lost;
//   - a live lease of another holder: ErrLeased, naming the holder and the
//     expiry and saying what to do, with or without opts.Force;
//   - an expired lease of another holder (LeaseInfo.Expired): taken over
//     with opts.Force (compare-and-swap on the version read), else
//     ErrLeased saying that --force would take it over;
//   - a lease object that does not decode: ErrCorrupt (replaced with
//     opts.Force), or ErrVersion (never replaced: a newer cairn wrote it).
//
// ErrLeased also matches ErrConflict. Backend errors are returned wrapped,
// with nothing acquired; an attempt whose outcome the backend left unknown
// is settled by the next AcquireLease (the holder finds its own lease).
func (s *Store) AcquireLease(ctx context.Context, workspace string, holder LeaseHolder, opts LeaseOptions) (*Lease, error) {
	if err := ValidWorkspaceName(workspace); err != nil {
		return nil, err
	}
	if err := holder.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	var tried []string // nonces of our attempts whose outcome is unknown
	for range 8 {
		st, err := s.readLease(ctx, workspace)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		now := opts.Now()
		if st != nil && st.bad == nil && slices.Contains(tried, st.nonce) {
			// Our own write, whose reply said conflict (a retried request
			// that had succeeded the first time).
			return &Lease{s: s, ttl: opts.TTL, now: opts.Now, info: *st.info, nonce: st.nonce, etag: st.etag}, nil
		}
		l := &Lease{s: s, ttl: opts.TTL, now: opts.Now, nonce: NewLeaseHolderID(), info: LeaseInfo{
			Workspace: workspace, Holder: holder, Generation: 1,
			Acquired: now, Renewed: now, Expires: now.Add(opts.TTL),
		}}
		cond := backend.Condition{IfNoneMatch: true}
		switch {
		case st == nil: // no lease
		case st.bad != nil:
			if errors.Is(st.bad, ErrVersion) {
				return nil, st.bad
			}
			if !opts.Force {
				return nil, fmt.Errorf("%w; if no mount of %q runs anywhere, mount with --force to replace it", st.bad, workspace)
			}
			cond = backend.Condition{IfMatch: st.etag}
		case st.info.Holder.Same(holder):
			l.info.Generation = st.info.Generation + 1
			cond = backend.Condition{IfMatch: st.etag}
		case !st.info.Expired(now) || !opts.Force:
			return nil, leasedError(st.info, now, opts.Force)
		default: // expired, forced
			l.info.Generation = st.info.Generation + 1
			cond = backend.Condition{IfMatch: st.etag}
		}
		data, err := encodeLease(&l.info, l.nonce)
		if err != nil {
			return nil, err
		}
		tried = append(tried, l.nonce)
		bi, err := s.be.Put(ctx, leaseKey(workspace), bytes.NewReader(data), cond)
		if err == nil {
			l.etag = bi.ETag
			return l, nil
		}
		if !errors.Is(err, backend.ErrConflict) && !errors.Is(err, backend.ErrNotFound) {
			return nil, fmt.Errorf("acquire the lease of %q: %w", workspace, err)
		}
		// Someone else wrote (or deleted) the lease since we read it:
		// read it again and decide again.
	}
	return nil, fmt.Errorf("%w: the lease of %q keeps changing; retry", ErrConflict, workspace)
}

// leasedError says that info's holder has the lease, and what to do.
func leasedError(info *LeaseInfo, now time.Time, force bool) error {
	ws, h := info.Workspace, info.Holder
	switch {
	case !now.After(info.Expires):
		msg := fmt.Sprintf("workspace %q is held by %s until %s; unmount it there, or, if that machine is gone, wait for the lease to expire: after %s, mount with --force to take it over",
			ws, h, leaseWhen(info.Expires, now), leaseWhen(info.TakeoverAfter(), now))
		if force {
			msg += " (--force takes over only an expired lease)"
		}
		return fmt.Errorf("%w: %s", ErrLeased, msg)
	case !info.Expired(now):
		msg := fmt.Sprintf("workspace %q is held by %s, whose lease expired at %s but is honoured for %v more to allow for clock differences between machines; after %s, mount with --force to take it over",
			ws, h, leaseWhen(info.Expires, now), LeaseGrace, leaseWhen(info.TakeoverAfter(), now))
		if force {
			msg += " (--force takes over only an expired lease)"
		}
		return fmt.Errorf("%w: %s", ErrLeased, msg)
	default:
		return fmt.Errorf("%w: workspace %q is held by %s, but its lease expired at %s: that mount stopped renewing it (it crashed, or cannot reach the store). If it is gone, mount with --force to take the workspace over; its changes since its last snapshot stay in its journal there",
			ErrLeased, ws, h, leaseWhen(info.Expires, now))
	}
}

// leaseWhen formats a time of a lease for people, with how far it is from
// now: "2026-05-01 12:03:10 UTC (in 24s)".
func leaseWhen(t, now time.Time) string {
	s := t.UTC().Format("2006-01-02 15:04:05 UTC")
	switch d := t.Sub(now).Round(time.Second); {
	case d > 0:
		return s + " (in " + d.String() + ")"
	case d < 0:
		return s + " (" + (-d).String() + " ago)"
	}
	return s + " (now)"
}

// Renew extends the lease by its TTL from now, by compare-and-swap on the
// version this process last wrote.
//
// If the lease was taken over (another holder, or the same holder in a
// restarted process) or deleted, Renew fails with ErrLeased saying who
// holds it now: the caller must stop serving writes. From then on Renew and
// Release return that same error without touching the backend. Any other
// error (the backend unreachable) leaves the lease as it was: retry; it
// stays ours until its expiry, and a later Renew still succeeds if nobody
// took it over in the meantime.
func (l *Lease) Renew(ctx context.Context) error {
	l.op.Lock()
	defer l.op.Unlock()
	return l.renew(ctx)
}

func (l *Lease) renew(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		l.mu.Lock()
		prev, etag, lost, released := l.info, l.etag, l.lost, l.released
		l.mu.Unlock()
		switch {
		case lost != nil:
			return lost
		case released:
			return fmt.Errorf("%w: the lease of %q was released", ErrInvalid, prev.Workspace)
		}

		ws := prev.Workspace
		now := l.now()
		next := prev
		next.Renewed, next.Expires = now, now.Add(l.ttl)
		if next.Renewed.Before(next.Acquired) { // the clock went back
			next.Renewed, next.Expires = next.Acquired, next.Acquired.Add(l.ttl)
		}
		data, err := encodeLease(&next, l.nonce)
		if err != nil {
			return err
		}
		bi, err := l.s.be.Put(ctx, leaseKey(ws), bytes.NewReader(data), backend.Condition{IfMatch: etag})
		if err == nil {
			l.mu.Lock()
			l.info, l.etag = next, bi.ETag
			l.mu.Unlock()
			return nil
		}
		if !errors.Is(err, backend.ErrConflict) && !errors.Is(err, backend.ErrNotFound) {
			return fmt.Errorf("renew the lease of %q: %w", ws, err)
		}
		// The object is not the version we wrote last. Ours still, if an
		// earlier renewal succeeded without our hearing of it (a request
		// retried after a lost reply); else the lease is lost.
		st, rerr := l.s.readLease(ctx, ws)
		if rerr != nil && !errors.Is(rerr, ErrNotFound) {
			return fmt.Errorf("renew the lease of %q: %w", ws, rerr)
		}
		if st != nil && st.bad == nil && st.nonce == l.nonce {
			if attempt >= 3 {
				return fmt.Errorf("%w: the lease of %q keeps changing; retry", ErrConflict, ws)
			}
			l.mu.Lock()
			l.info, l.etag = *st.info, st.etag
			l.mu.Unlock()
			continue // once more, on the version we now know
		}
		lost = lostError(ws, &prev, st, now)
		l.mu.Lock()
		l.lost = lost
		l.mu.Unlock()
		return lost
	}
}

// lostError says that our lease (last written as ours) is no longer ours,
// and who has it now (st; nil if the object is gone).
func lostError(ws string, ours *LeaseInfo, st *storedLease, now time.Time) error {
	const what = "this mount must stop serving writes (its changes since the last snapshot stay in its journal)"
	switch {
	case st == nil:
		return fmt.Errorf("%w: the lease of workspace %q is lost: its object was deleted (by hand, or by a mount elsewhere that took it over and released it); %s", ErrLeased, ws, what)
	case st.bad != nil:
		return fmt.Errorf("%w: the lease of workspace %q is lost: someone replaced it (%v); %s", ErrLeased, ws, st.bad, what)
	case st.info.Holder.Same(ours.Holder):
		return fmt.Errorf("%w: the lease of workspace %q is lost: re-acquired at %s by another process with the same holder ID (a restarted daemon?), %s, generation %d; %s",
			ErrLeased, ws, leaseWhen(st.info.Acquired, now), st.info.Holder, st.info.Generation, what)
	default:
		return fmt.Errorf("%w: the lease of workspace %q is lost: taken over at %s by %s, generation %d; this mount's lease ran until %s; %s",
			ErrLeased, ws, leaseWhen(st.info.Acquired, now), st.info.Holder, st.info.Generation, leaseWhen(ours.Expires, now), what)
	}
}

// Release gives the lease up, deleting its object if it is still ours.
// It first renews the lease (a compare-and-swap that proves it is ours and
// gives it a full TTL), then deletes it: nobody may take a live lease over,
// so the delete cannot remove another holder's lease as long as it lands
// within the TTL (its context is cut at the new expiry) and clocks agree
// within LeaseGrace. A lease that was taken over is left alone: Release
// returns the ErrLeased of Renew. Releasing twice is a no-op. If the
// backend cannot be reached the lease stays, and expires on its own.
func (l *Lease) Release(ctx context.Context) error {
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return nil
	}
	if err := l.renew(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	l.mu.Lock()
	info := l.info
	l.mu.Unlock()
	// The deadline is by our clock, which renew used for the expiry.
	dctx, cancel := context.WithTimeout(ctx, info.Expires.Sub(l.now()))
	defer cancel()
	if err := l.s.be.Delete(dctx, leaseKey(info.Workspace)); err != nil {
		return fmt.Errorf("release the lease of %q (it expires by itself at %s): %w", info.Workspace, leaseWhen(info.Expires, l.now()), err)
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	return nil
}
