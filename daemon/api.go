package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/outbox"
	"github.com/cairnfs/cairn/journal"
)

// The control API: HTTP/JSON on the daemon's unix socket.
//
//	GET  /v1/status    -> StatusReply
//	GET  /v1/progress  -> journal.Progress (never waits for the running operation)
//	POST /v1/snapshot  SnapshotRequest -> SnapshotReply
//	POST /v1/rollback  RollbackRequest -> RollbackReply
//	POST /v1/restore   RestoreRequest -> RestoreReply
//	POST /v1/livetree  -> LiveTreeReply
//	POST /v1/unmount   -> {} (the daemon flushes, unmounts and exits)
//
// Errors come back as a non-2xx status with ErrorReply.

// StatusReply is a mounted workspace's state.
type StatusReply struct {
	Workspace    string    `json:"workspace"`
	Dir          string    `json:"dir"`
	PID          int       `json:"pid"`
	Store        string    `json:"store"`
	Started      time.Time `json:"started"`
	Head         string    `json:"head,omitempty"` // last snapshot (the journal's base)
	Seq          uint64    `json:"seq"`
	SnapshotTime time.Time `json:"snapshot_time,omitzero"`
	DirtyInodes  int       `json:"dirty_inodes"`
	DirtyBytes   uint64    `json:"dirty_bytes"`
	Files        uint64    `json:"files"`
	Bytes        uint64    `json:"bytes"`
	Inodes       uint64    `json:"inodes"`
	OpenFiles    int       `json:"open_files"`
	Passthrough  bool      `json:"passthrough"`
	IDMapped     bool      `json:"idmapped"` // the mount may be bound id-mapped (fs.FS.IDMapped)
	// Transport is how the kernel's FUSE requests reach the daemon:
	// "io_uring" (through TransportQueues queues, RingRequests served so
	// far) or "/dev/fuse" (TransportFallback: why not io_uring, when
	// io_uring was asked for where available).
	Transport         string       `json:"transport"`
	TransportQueues   int          `json:"transport_queues,omitempty"`
	TransportFallback string       `json:"transport_fallback,omitempty"`
	RingRequests      uint64       `json:"ring_requests,omitempty"`
	JournalBytes      int64        `json:"journal_bytes"`     // local disk used by the journal and staging files
	CacheBytes        int64        `json:"cache_bytes"`       // local disk used by the store's cache
	Uploads           *Uploads     `json:"uploads,omitempty"` // a remote store's outbox
	Lease             *LeaseStatus `json:"lease,omitempty"`
	// ReadOnly is set once the daemon lost its lease: writes fail with
	// EROFS and snapshots are refused; ReadOnlyReason says why.
	ReadOnly       bool   `json:"read_only"`
	ReadOnlyReason string `json:"read_only_reason,omitempty"`
	// LostSnapshots are the workspace's snapshots that are in the store but
	// not on its history (chunkstore.LostSnapshot), with their fork commands.
	LostSnapshots []LostStatus `json:"lost_snapshots,omitempty"`
}

// LostStatus is a lost snapshot as status and `cairn workspaces` show it.
type LostStatus struct {
	chunkstore.LostSnapshot
	Fork string `json:"fork"` // the command that keeps it as a workspace
}

// LostStatusOf lists a workspace's lost snapshots for people.
func LostStatusOf(lost []chunkstore.LostSnapshot) []LostStatus {
	var out []LostStatus
	for _, l := range lost {
		out = append(out, LostStatus{LostSnapshot: l, Fork: l.ForkCommand()})
	}
	return out
}

// Uploads is what a workspace's outbox holds: snapshots committed here
// whose upload to the remote store has not finished.
type Uploads struct {
	Pending  int       `json:"pending"` // queued writes (packs, index files, records, ref moves)
	Bytes    int64     `json:"bytes"`
	Oldest   time.Time `json:"oldest,omitzero"`
	Failing  string    `json:"failing,omitempty"` // the last error while uploads fail
	Since    time.Time `json:"since,omitzero"`
	Uploaded uint64    `json:"uploaded"` // writes uploaded since the daemon started
	// Lost names ref moves another writer beat; their snapshots are in
	// the store and can be forked.
	Lost []string `json:"lost,omitempty"`
}

// UploadsOf summarises an outbox's Pending.
func UploadsOf(p outbox.Pending) *Uploads {
	u := &Uploads{Pending: p.Entries, Bytes: p.Bytes, Oldest: p.Oldest, Since: p.Since, Uploaded: p.Uploaded}
	if p.Failing != nil {
		u.Failing = p.Failing.Error()
	}
	for _, l := range p.Lost {
		u.Lost = append(u.Lost, strings.TrimPrefix(l.Key, "refs/")+" -> "+lostSnapshot(l.Value))
	}
	return u
}

// lostSnapshot names the snapshot a lost ref value pointed at.
func lostSnapshot(v []byte) string {
	var r struct {
		Snapshot string `json:"snapshot"`
	}
	if json.Unmarshal(v, &r) != nil || r.Snapshot == "" {
		return "?"
	}
	return r.Snapshot
}

// SnapshotRequest asks for a snapshot (turn end).
type SnapshotRequest struct {
	Message string            `json:"message,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Provenance is added to the record's (cairn run: argv, exit status,
	// limits...); the daemon adds the mount and the host.
	Provenance map[string]string `json:"provenance,omitempty"`
	// Excluded is recorded as what a policy kept out of the snapshot.
	Excluded []chunkstore.Exclusion `json:"excluded,omitempty"`
	// Egress is recorded as the turn's egress log.
	Egress *chunkstore.Egress `json:"egress,omitempty"`
	// Wait returns only once the snapshot is uploaded and the ref moved
	// (a remote store; a local one always is).
	Wait bool `json:"wait,omitempty"`
}

// UnmountRequest asks the daemon to stop. It first waits for the outbox
// to drain, unless NoWait.
type UnmountRequest struct {
	NoWait bool `json:"no_wait,omitempty"`
}

// SnapshotReply names the new snapshot.
type SnapshotReply struct {
	ID    string                   `json:"id"`
	Seq   uint64                   `json:"seq"`
	Stats chunkstore.SnapshotStats `json:"stats"`
	// Done: the snapshot is in the store and the workspace's ref points at
	// it. Not done: committed here, uploading in the background
	// (PendingUploads writes queued; see `cairn status`).
	Done           bool    `json:"done"`
	PendingUploads int     `json:"pending_uploads,omitempty"`
	Millis         float64 `json:"millis"` // time the daemon took
}

// RollbackRequest asks to reset the live state to a snapshot.
type RollbackRequest struct {
	To string `json:"to"` // a snapshot reference (chunkstore.Resolve)
	// Force rolls back even while files are open; their handles then fail
	// with ESTALE.
	Force bool `json:"force,omitempty"`
}

// RollbackReply names the snapshot of the discarded state.
type RollbackReply struct {
	To        string `json:"to"`
	Discarded string `json:"discarded"`
}

// RestoreRequest asks to revert paths of the live state to a snapshot.
type RestoreRequest struct {
	From  string   `json:"from"`  // a snapshot reference (chunkstore.Resolve)
	Paths []string `json:"paths"` // relative to the workspace root
}

// RestoreReply says what was restored and names the snapshot of the state
// before.
type RestoreReply struct {
	From   string                 `json:"from"`
	Before string                 `json:"before"`
	Paths  []journal.RestoredPath `json:"paths"`
	// Snapshot is the snapshot taken after an offline restore (which has
	// no live state to leave the change in); empty on a mounted workspace.
	Snapshot string `json:"snapshot,omitempty"`
}

// LiveTreeReply names the root tree of the live state (stored, not a
// snapshot): what `cairn diff` compares with.
type LiveTreeReply struct {
	Root string `json:"root"`
}

// ErrorReply is the body of a failed request.
type ErrorReply struct {
	Error string `json:"error"`
	Kind  string `json:"kind"` // not_found, invalid, conflict, busy, corrupt, io
}

var errorKinds = []struct {
	kind string
	err  error
}{
	{"not_found", chunkstore.ErrNotFound},
	{"not_found", journal.ErrNotFound},
	{"invalid", chunkstore.ErrInvalid},
	{"invalid", journal.ErrInvalid},
	{"conflict", chunkstore.ErrConflict},
	{"busy", ErrBusy},
	{"busy", journal.ErrBusy},
	{"corrupt", chunkstore.ErrCorrupt},
	{"not_found", ErrNotMounted},
	{"stale", ErrStale},
}

// KindOf names the kind of err for the wire (ErrorReply.Kind).
func KindOf(err error) string { return kindOf(err) }

// ErrorOf rebuilds an error of a kind from its text (see ErrorReply).
func ErrorOf(kind, msg string) error { return errorOf(ErrorReply{Error: msg, Kind: kind}) }

func kindOf(err error) string {
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "io"
}

// errorOf turns an ErrorReply back into an error wrapping the sentinel of
// its kind, so that callers (and exit codes) can tell kinds apart.
func errorOf(r ErrorReply) error {
	for _, k := range errorKinds {
		if k.kind == r.Kind {
			return fmt.Errorf("%s%w", r.Error, silent{k.err})
		}
	}
	return errors.New(r.Error)
}

// silent wraps a sentinel without adding its text.
type silent struct{ err error }

func (s silent) Error() string { return "" }
func (s silent) Unwrap() error { return s.err }

// Client talks to a daemon's control socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{socket: socket, http: &http.Client{Transport: tr}}
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://cairn"+path, &body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("the daemon at %s does not answer (%v): %w", c.socket, err, ErrStale)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e ErrorReply
		if json.NewDecoder(resp.Body).Decode(&e) != nil || e.Error == "" {
			return fmt.Errorf("daemon: %s", resp.Status)
		}
		return errorOf(e)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (*StatusReply, error) {
	var r StatusReply
	return &r, c.call(ctx, http.MethodGet, "/v1/status", nil, &r)
}

// Progress returns the counts of the daemon's running (or last) snapshot
// or restore.
func (c *Client) Progress(ctx context.Context) (journal.Progress, error) {
	var p journal.Progress
	return p, c.call(ctx, http.MethodGet, "/v1/progress", nil, &p)
}

// Snapshot takes a snapshot of the live workspace.
func (c *Client) Snapshot(ctx context.Context, req SnapshotRequest) (*SnapshotReply, error) {
	var r SnapshotReply
	return &r, c.call(ctx, http.MethodPost, "/v1/snapshot", req, &r)
}

// Rollback resets the live workspace to a snapshot.
func (c *Client) Rollback(ctx context.Context, req RollbackRequest) (*RollbackReply, error) {
	var r RollbackReply
	return &r, c.call(ctx, http.MethodPost, "/v1/rollback", req, &r)
}

// Restore reverts paths of the live workspace to a snapshot.
func (c *Client) Restore(ctx context.Context, req RestoreRequest) (*RestoreReply, error) {
	var r RestoreReply
	return &r, c.call(ctx, http.MethodPost, "/v1/restore", req, &r)
}

// LiveTree stores the live state's trees and returns the root's ID.
func (c *Client) LiveTree(ctx context.Context) (*LiveTreeReply, error) {
	var r LiveTreeReply
	return &r, c.call(ctx, http.MethodPost, "/v1/livetree", struct{}{}, &r)
}

// Unmount asks the daemon to flush, unmount and exit.
func (c *Client) Unmount(ctx context.Context, req UnmountRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/unmount", req, nil)
}
