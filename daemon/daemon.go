package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/outbox"
	cfs "github.com/cairnfs/cairn/fs"
	"github.com/cairnfs/cairn/journal"
)

// Config configures Run.
type Config struct {
	Home      string // the state directory
	Store     string // the store's location (chunkstore.OpenBackend)
	Workspace string
	Dir       string // the mount point
	// From is a snapshot reference a new workspace starts from (empty: the
	// workspace's head, or empty). A workspace that has a journal already
	// refuses it.
	From          string
	Host, Version string
	NoPassthrough bool
	// NoIDMap mounts without FUSE_ALLOW_IDMAP: a sandbox then binds the
	// workspace as it is, not id-mapped (see fs.Options.IDMap). Default:
	// id-mapped binds allowed where the kernel supports them.
	NoIDMap bool
	// Force takes over the workspace's lease if its holder let it expire.
	Force bool
	// Transport is how FUSE requests reach the daemon (fs.Transport):
	// through io_uring, /dev/fuse, or io_uring where available. Default:
	// fs.TransportDefault.
	Transport cfs.Transport
	// CacheSize bounds the local cache of a remote store's data
	// (chunkstore.Options.CacheSize).
	CacheSize int64
	// LeaseTTL is how long the lease lasts unrenewed. Default:
	// chunkstore.DefaultLeaseTTL.
	LeaseTTL time.Duration
	Logf     func(format string, args ...any)
}

// Run mounts a workspace and serves it until ctx is done (SIGTERM), an
// unmount request arrives on the control socket, or the mount goes away.
// ready is called once: with nil when the mount serves, or with the error
// that stopped it before. On the way out it unmounts, flushes the journal
// and the store, and removes its record and socket.
func Run(ctx context.Context, cfg Config, ready func(error)) (err error) {
	once := sync.Once{}
	signal := func(err error) { once.Do(func() { ready(err) }) }
	defer func() { signal(err) }()
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	p := PathsOf(cfg.Home, cfg.Workspace)
	if err := chunkstore.ValidWorkspaceName(cfg.Workspace); err != nil {
		return err
	}
	if len(p.Socket) > socketPathMax {
		return fmt.Errorf("%w: control socket path %s is %d bytes, longer than unix sockets allow (%d); use a shorter --home", chunkstore.ErrInvalid, p.Socket, len(p.Socket), socketPathMax)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	for _, d := range []string{p.Dir, filepath.Dir(p.Socket), p.Cache} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// The workspace's local lock comes before anything else: a mount
	// refused here has touched nothing of the daemon that holds it (its
	// lease, which this process would re-acquire and release as its own,
	// its record, its socket). The lock is the process's until it exits.
	lock, err := LockWorkspace(cfg.Home, cfg.Workspace)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := checkMountPoint(dir); err != nil {
		return err
	}

	be, err := chunkstore.OpenBackend(ctx, cfg.Store, false)
	if err != nil {
		return err
	}
	// A remote store is written through the workspace's outbox: snapshots
	// commit to local disk and upload in the background.
	storeBe := be
	var ob *outbox.Backend
	lostRefs := make(chan outbox.Lost, 64)
	if !be.Properties().Local {
		// A ref move found lost is recorded in the store, where every
		// machine lists it with the command that forks it (recordLost).
		onLost := func(l outbox.Lost) {
			select {
			case lostRefs <- l:
			default:
				cfg.Logf("cairn: %s lost its compare-and-swap (%s); too many to record", l.Key, lostSnapshot(l.Value))
			}
		}
		if ob, err = outbox.Open(be, p.Outbox, outbox.Options{Logf: cfg.Logf, OnLost: onLost}); err != nil {
			be.Close()
			return err
		}
		storeBe = ob
	}
	store, err := chunkstore.Open(ctx, storeBe, chunkstore.Options{CacheDir: p.Cache, CacheSize: cfg.CacheSize, Logf: prefixLogf(cfg.Logf)})
	if err != nil {
		if ob != nil {
			ob.Close()
		}
		be.Close()
		return fmt.Errorf("open store %s: %w", cfg.Store, err)
	}
	recCtx, stopRecording := context.WithCancel(context.Background())
	recorded := make(chan struct{})
	go func() { defer close(recorded); recordLost(recCtx, store, lostRefs, cfg.Logf) }()
	var lease *LeaseKeeper
	defer func() {
		stopRecording()
		<-recorded
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("flush the store: %w", cerr)
		}
		if ob != nil {
			// Unmount drained the outbox already, unless asked not to; a
			// signal gets a short grace. What is left uploads at the next
			// mount (or `cairn snapshot` of the unmounted workspace).
			wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if werr := ob.Wait(wctx); werr != nil {
				cfg.Logf("cairn: uploads still queued at exit (%v); they continue at the next mount", werr)
			}
			cancel()
		}
		// The lease goes last: no other machine mounts the workspace
		// while this one's uploads drain.
		if lease != nil {
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if lerr := lease.Close(lctx); lerr != nil {
				cfg.Logf("cairn: releasing the lease of %q: %v (it expires by itself)", cfg.Workspace, lerr)
			}
			cancel()
		}
		if ob != nil {
			ob.Close()
		}
		be.Close()
	}()
	lost := make(chan error, 1)
	lease, err = OpenLease(ctx, LeaseConfig{Store: store, Workspace: cfg.Workspace, Home: cfg.Home,
		Description: "mount " + dir, Force: cfg.Force, TTL: cfg.LeaseTTL, Logf: cfg.Logf,
		OnLost: func(err error) {
			select {
			case lost <- err:
			default:
			}
		}})
	if err != nil {
		return err
	}
	var from chunkstore.ID
	if cfg.From != "" {
		if _, err := os.Stat(p.Journal); err == nil {
			return fmt.Errorf("%w: workspace %q exists here already; --from only starts a new workspace (use `cairn fork` for a new one)", chunkstore.ErrConflict, cfg.Workspace)
		}
		if _, err := store.Ref(ctx, cfg.Workspace); err == nil {
			return fmt.Errorf("%w: workspace %q exists in the store already; --from only starts a new workspace", chunkstore.ErrConflict, cfg.Workspace)
		}
		if from, err = store.Resolve(ctx, cfg.From); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
	}
	inv := &lateInvalidator{}
	j, err := journal.Open(ctx, journal.Config{
		Dir: p.Journal, Store: store, Workspace: cfg.Workspace, From: from,
		Host: cfg.Host, Version: cfg.Version, Logf: cfg.Logf, Invalidator: inv,
	})
	if err != nil {
		if strings.Contains(err.Error(), "Cannot acquire directory lock") {
			return fmt.Errorf("%w: the journal of %q is open in another process (a daemon still exiting?)", ErrBusy, cfg.Workspace)
		}
		return fmt.Errorf("open the journal of %q: %w", cfg.Workspace, err)
	}
	journalOpen := true
	defer func() {
		if !journalOpen {
			return
		}
		if cerr := closeJournal(j, journalCloseTimeout); cerr != nil && err == nil {
			err = fmt.Errorf("close the journal: %w", cerr)
		}
	}()

	f := cfs.New(j, cfs.Options{NoPassthrough: cfg.NoPassthrough, IDMap: !cfg.NoIDMap, Transport: cfg.Transport, Logf: cfg.Logf})
	inv.set(f.Invalidator())
	srv, err := cfs.Mount(dir, f, "cairn:"+cfg.Workspace)
	if errors.Is(err, cfs.ErrTransport) {
		return fmt.Errorf("%w; --fuse-transport=auto falls back to /dev/fuse", err)
	}
	if err != nil {
		return err
	}
	if !cfg.NoIDMap && !f.IDMapped() {
		cfg.Logf("cairn: the kernel does not support id-mapped FUSE mounts (Linux 6.12 and later do): sandboxes bind the workspace with its host owners")
	}
	_, dev, _ := mountAt(dir)
	d := &daemon{cfg: cfg, paths: p, dir: dir, dev: dev, j: j, store: store, outbox: ob, lease: lease, fs: f, srv: srv,
		started: time.Now(), stop: make(chan struct{}), gone: make(chan struct{})}
	go func() { srv.Wait(); close(d.gone) }()
	// On the way out: detach the mount, close the journal, then end the
	// FUSE connection, so that processes still holding the mount (open
	// files, copies in other mount namespaces) get ENOTCONN, not a hang.
	defer func() {
		d.detach()
		journalOpen = false
		if cerr := closeJournal(j, journalCloseTimeout); cerr != nil && err == nil {
			err = fmt.Errorf("close the journal: %w", cerr)
		}
		d.abort()
	}()

	os.Remove(p.Socket) // a stale socket of a killed daemon
	ln, err := net.Listen("unix", p.Socket)
	if err != nil {
		return fmt.Errorf("control socket %s: %w", p.Socket, err)
	}
	hs := &http.Server{Handler: d.routes(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
		os.Remove(p.Socket)
	}()

	rec := &Record{Workspace: cfg.Workspace, Dir: dir, PID: os.Getpid(), Socket: p.Socket, Store: cfg.Store, Started: d.started}
	if err := writeRecord(p.Record, rec); err != nil {
		return fmt.Errorf("write mount record: %w", err)
	}
	defer os.Remove(p.Record)

	signal(nil)
	cfg.Logf("cairn: serving workspace %q at %s", cfg.Workspace, dir)
	leaseLost := (<-chan error)(lost)
	for {
		select {
		case <-ctx.Done():
			cfg.Logf("cairn: signalled; unmounting %s", dir)
		case <-d.stop:
			cfg.Logf("cairn: unmount requested; unmounting %s", dir)
		case <-d.gone:
			cfg.Logf("cairn: %s was unmounted", dir)
		case err := <-leaseLost:
			// Another machine holds the workspace now. Two must never
			// write it at once, and unmounting would let writes land in
			// the bare directory underneath: the mount stays, read-only.
			// The journal keeps what was not snapshotted (the next mount
			// here keeps it as a snapshot of its own, see
			// journal/reconcile.go); the ref's compare-and-swap keeps the
			// store sound.
			j.SetReadOnly(err)
			cfg.Logf("cairn: the lease of %q was lost (%v); %s is read-only now: writes fail with EROFS, snapshots are refused; `cairn unmount %s` when done", cfg.Workspace, err, dir, cfg.Workspace)
			leaseLost = nil // reported once
			continue
		}
		return nil
	}
}

// recordLost records in the store each ref move the outbox found lost, so
// that every machine lists its snapshot (`cairn workspaces`) with the
// command that forks it, until ctx is done.
func recordLost(ctx context.Context, store *chunkstore.Store, lost <-chan outbox.Lost, logf func(string, ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-lost:
			RecordLostRef(ctx, store, l, logf)
		}
	}
}

// RecordLostRef records in the store the snapshot of a ref move that an
// outbox found lost (another writer moved the ref first), so that every
// machine lists it (`cairn workspaces`) with the command that forks it.
func RecordLostRef(ctx context.Context, store *chunkstore.Store, l outbox.Lost, logf func(string, ...any)) {
	ws := strings.TrimPrefix(l.Key, "refs/")
	id, err := chunkstore.ParseID(lostSnapshot(l.Value))
	if err != nil {
		logf("cairn: %s lost its compare-and-swap; its value names no snapshot (%v)", l.Key, err)
		return
	}
	rec := chunkstore.LostSnapshot{Workspace: ws, Snapshot: id, Time: l.Time,
		Reason: "its upload found the workspace's ref moved by another writer"}
	if snap, err := store.Snapshot(ctx, id); err == nil {
		rec.Host = snap.Host
		if len(snap.Parents) > 0 {
			rec.Parent = snap.Parents[0]
		}
	}
	if head, err := store.Ref(ctx, ws); err == nil {
		rec.Head = head.Snapshot
	}
	logf("cairn: snapshot %s of %q is not on its history: another writer moved the ref first; it is in the store: %s", id.Short(), ws, rec.ForkCommand())
	if err := store.RecordLost(ctx, rec); err != nil {
		logf("cairn: recording lost snapshot %s: %v", id.Short(), err)
	}
}

type daemon struct {
	cfg     Config
	paths   Paths
	dir     string
	dev     string // the mount's device ("0:N"; N is its FUSE connection)
	j       *journal.Journal
	store   *chunkstore.Store
	outbox  *outbox.Backend // nil: a local store, written directly
	lease   *LeaseKeeper
	fs      *cfs.FS
	srv     *cfs.Server
	started time.Time

	stopOnce sync.Once
	stop     chan struct{}
	gone     chan struct{} // closed when the FUSE server has stopped
	mu       sync.Mutex    // serialises snapshot and rollback requests
}

// detach takes the mount away from this mount namespace: politely first,
// then (files still open) lazily. Processes that hold files or a copy of
// the mount (another mount namespace: `unshare -m`, `cairn run`) are
// served on until abort.
func (d *daemon) detach() {
	for i := 0; i < 10; i++ {
		if _, dev, ok := mountAt(d.dir); !ok || (d.dev != "" && dev != d.dev) {
			return // unmounted already (by someone else)
		}
		if unix.Unmount(d.dir, 0) == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.cfg.Logf("cairn: %s is busy; detaching it (processes with open files there get ENOTCONN once the journal is closed)", d.dir)
	if err := unix.Unmount(d.dir, unix.MNT_DETACH); err != nil {
		d.cfg.Logf("cairn: detach %s: %v", d.dir, err)
	}
}

// abort ends the FUSE connection once the journal is closed: whatever
// still holds the mount gets ENOTCONN, and the server's loops end. If
// fusectl cannot do it, the connection ends when this process exits (the
// kernel aborts it when /dev/fuse is closed).
func (d *daemon) abort() {
	select {
	case <-d.gone:
		return // the kernel ended it: the last copy of the mount is gone
	default:
	}
	n, ok := connOf(d.dev)
	if !ok {
		d.cfg.Logf("cairn: the FUSE connection of %s is unknown (device %q); it ends when this process exits", d.dir, d.dev)
		return
	}
	if err := abortConn(n); err != nil {
		d.cfg.Logf("cairn: abort the FUSE connection of %s: %v; it ends when this process exits", d.dir, err)
		return
	}
	select {
	case <-d.gone:
	case <-time.After(5 * time.Second):
		d.cfg.Logf("cairn: the FUSE server of %s did not stop after the connection was aborted; exiting anyway", d.dir)
	}
}

func (d *daemon) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		v, err := d.status(r.Context())
		reply(w, v, err)
	})
	mux.HandleFunc("GET /v1/progress", func(w http.ResponseWriter, _ *http.Request) { reply(w, d.j.Progress(), nil) })
	mux.HandleFunc("POST /v1/snapshot", handle(d.snapshot))
	mux.HandleFunc("POST /v1/rollback", handle(d.rollback))
	mux.HandleFunc("POST /v1/restore", handle(d.restore))
	mux.HandleFunc("POST /v1/livetree", handle(d.liveTree))
	mux.HandleFunc("POST /v1/unmount", handle(d.unmountRequest))
	return mux
}

// handle serves a JSON request with fn.
func handle[Req, Rep any](fn func(context.Context, Req) (Rep, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(w, fmt.Errorf("%w: bad request: %v", chunkstore.ErrInvalid, err))
			return
		}
		v, err := fn(r.Context(), req)
		reply(w, v, err)
	}
}

func reply[T any](w http.ResponseWriter, v T, err error) {
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch kindOf(err) {
	case "not_found":
		code = http.StatusNotFound
	case "invalid":
		code = http.StatusBadRequest
	case "conflict", "busy":
		code = http.StatusConflict
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(ErrorReply{Error: err.Error(), Kind: kindOf(err)})
}

func (d *daemon) status(ctx context.Context) (*StatusReply, error) {
	s, err := d.j.Status(ctx)
	if err != nil {
		return nil, err
	}
	r := &StatusReply{
		Workspace: d.cfg.Workspace, Dir: d.dir, PID: os.Getpid(), Store: d.cfg.Store, Started: d.started,
		Seq: s.Seq, DirtyInodes: s.DirtyInodes, DirtyBytes: s.DirtyBytes, Files: s.Files, Bytes: s.Bytes,
		Inodes: s.Inodes, OpenFiles: s.OpenFiles, Passthrough: d.fs.Passthrough(), IDMapped: d.fs.IDMapped(),
		Transport: d.srv.Transport(), TransportQueues: d.srv.Queues(), TransportFallback: d.srv.Fallback(), RingRequests: d.srv.RingRequests(),
		JournalBytes: diskUsage(d.paths.Journal), CacheBytes: diskUsage(d.paths.Cache),
	}
	if d.outbox != nil {
		r.Uploads = UploadsOf(d.outbox.Pending())
	}
	ls := d.lease.Status()
	r.Lease = &ls
	if ls.State == LeaseLost {
		// The main loop turns the journal read-only as soon as it hears;
		// say so from the moment the loss is known, not a moment later.
		d.j.SetReadOnly(d.lease.Err())
	}
	if ro := d.j.ReadOnly(); ro != nil {
		r.ReadOnly, r.ReadOnlyReason = true, ro.Error()
	}
	if lost, err := d.store.Lost(ctx, d.cfg.Workspace); err == nil {
		r.LostSnapshots = LostStatusOf(lost)
	}
	if !s.Base.IsZero() {
		r.Head = s.Base.String()
		if snap, err := d.store.Snapshot(ctx, s.Base); err == nil {
			r.SnapshotTime = snap.Time
		}
	}
	return r, nil
}

// snapshot flushes the kernel (flushKernel: every write acknowledged
// before the request is in the journal), then commits.
func (d *daemon) snapshot(ctx context.Context, req SnapshotRequest) (*SnapshotReply, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.lease.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := d.flushKernel(ctx); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	prov := map[string]string{"mount": d.dir, "host": host}
	for k, v := range req.Provenance {
		prov[k] = v
	}
	id, err := d.j.Snapshot(ctx, journal.SnapshotOptions{Message: req.Message, Labels: req.Labels,
		Provenance: prov, Excluded: req.Excluded, Egress: req.Egress})
	if err != nil {
		return nil, err
	}
	snap, err := d.store.Snapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	rep := &SnapshotReply{ID: id.String(), Seq: snap.Seq, Stats: snap.Stats, Done: true}
	if d.outbox != nil {
		if req.Wait {
			if err := d.outbox.Wait(ctx); err != nil {
				return nil, fmt.Errorf("snapshot %s is committed here, but its upload did not finish: %w", id.Short(), err)
			}
		}
		p := d.outbox.Pending()
		rep.PendingUploads, rep.Done = p.Entries, p.Entries == 0
		for _, l := range p.Lost {
			if l.Key == "refs/"+d.cfg.Workspace {
				rep.Done = false
			}
		}
	}
	rep.Millis = float64(time.Since(start).Microseconds()) / 1000
	return rep, nil
}

func (d *daemon) rollback(ctx context.Context, req RollbackRequest) (*RollbackReply, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.lease.Err(); err != nil {
		return nil, err
	}
	to, err := d.store.Resolve(ctx, req.To)
	if err != nil {
		return nil, err
	}
	if err := d.flushKernel(ctx); err != nil {
		return nil, err
	}
	discarded, err := d.j.Rollback(ctx, to, req.Force)
	if err != nil {
		return nil, err
	}
	return &RollbackReply{To: to.String(), Discarded: discarded.String()}, nil
}

// unmountRequest drains the outbox (unless NoWait), then stops the daemon.
// While it waits the mount keeps serving.
func (d *daemon) unmountRequest(ctx context.Context, req UnmountRequest) (*struct{}, error) {
	if d.outbox != nil && !req.NoWait {
		if err := d.outbox.Wait(ctx); err != nil {
			return nil, fmt.Errorf("waiting for uploads to the store: %w; the workspace stays mounted (cairn unmount --no-wait leaves them queued for the next mount)", err)
		}
	}
	d.stopOnce.Do(func() { close(d.stop) })
	return &struct{}{}, nil
}

func (d *daemon) restore(ctx context.Context, req RestoreRequest) (*RestoreReply, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.lease.Err(); err != nil {
		return nil, err
	}
	from, err := d.store.Resolve(ctx, req.From)
	if err != nil {
		return nil, err
	}
	if err := d.flushKernel(ctx); err != nil {
		return nil, err
	}
	res, err := d.j.Restore(ctx, from, req.Paths)
	if err != nil {
		return nil, err
	}
	return &RestoreReply{From: from.String(), Before: res.Before.String(), Paths: res.Paths}, nil
}

func (d *daemon) liveTree(ctx context.Context, _ struct{}) (*LiveTreeReply, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.flushKernel(ctx); err != nil {
		return nil, err
	}
	root, err := d.j.LiveTree(ctx)
	if err != nil {
		return nil, err
	}
	return &LiveTreeReply{Root: root.String()}, nil
}

// diskUsage is the space the files under dir take on disk.
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		if fi, err := e.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// lateInvalidator forwards to the FUSE layer's invalidator once it exists
// (the journal is opened before the FUSE layer that serves it).
type lateInvalidator struct {
	mu  sync.Mutex
	inv journal.Invalidator
}

func (l *lateInvalidator) set(inv journal.Invalidator) {
	l.mu.Lock()
	l.inv = inv
	l.mu.Unlock()
}

func (l *lateInvalidator) get() journal.Invalidator {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inv
}

func (l *lateInvalidator) InvalidateEntry(parent journal.Ino, name string) {
	if inv := l.get(); inv != nil {
		inv.InvalidateEntry(parent, name)
	}
}

func (l *lateInvalidator) InvalidateInode(ino journal.Ino) {
	if inv := l.get(); inv != nil {
		inv.InvalidateInode(ino)
	}
}

func (l *lateInvalidator) InvalidateAll() {
	if inv := l.get(); inv != nil {
		inv.InvalidateAll()
	}
}

// checkMountPoint refuses a mount point that is missing, not a directory,
// mounted already, or a stale FUSE mount, with a hint.
func checkMountPoint(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, syscall.ENOTCONN):
		return fmt.Errorf("%w: %s is a mount whose daemon is gone; `cairn unmount %s` cleans it up", ErrStale, dir, dir)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: mount point %s does not exist; create it first (mkdir -p %s)", chunkstore.ErrNotFound, dir, dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%w: mount point %s is not a directory", chunkstore.ErrInvalid, dir)
	}
	if typ, ok := mountType(dir); ok {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); errors.Is(err, syscall.ENOTCONN) {
			return fmt.Errorf("%w: %s is a mount whose daemon is gone; `cairn unmount %s` cleans it up", ErrStale, dir, dir)
		}
		hint := "unmount it first"
		if typ == "fuse."+cfs.TypeName {
			hint = "`cairn unmount " + dir + "` first"
		}
		return fmt.Errorf("%w: %s is a mount point already (%s); %s", ErrBusy, dir, typ, hint)
	}
	return nil
}

func isMountPoint(dir string) bool {
	_, ok := mountType(dir)
	return ok
}

// mountType returns the type of the mount at dir.
func mountType(dir string) (string, bool) {
	typ, _, ok := mountAt(dir)
	return typ, ok
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CleanStale unmounts a mount point whose daemon is gone (lazily: the
// kernel drops it once unused) and removes the workspace's stale record.
// With a record (its daemon known dead, or not answering), the mount's
// FUSE connection is aborted first: a killed daemon whose thread waits on
// its own mount cannot end until then.
func CleanStale(home string, r *Record, dir string) error {
	if r != nil {
		dir = r.Dir
		if typ, dev, ok := mountAt(dir); ok && typ == "fuse."+cfs.TypeName {
			n, ok := connOf(dev)
			if !ok || abortConn(n) != nil {
				_ = unix.Unmount(dir, unix.MNT_FORCE) // FUSE aborts the connection at a forced unmount
			}
		}
	}
	if dir != "" && isMountPoint(dir) {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount stale %s: %w", dir, err)
		}
	}
	if r != nil {
		os.Remove(PathsOf(home, r.Workspace).Record)
		os.Remove(r.Socket)
	}
	return nil
}

// IsCairnMount reports whether dir is a cairn FUSE mount.
func IsCairnMount(dir string) bool {
	typ, ok := mountType(dir)
	return ok && typ == "fuse."+cfs.TypeName
}

// journalCloseTimeout bounds how long a daemon waits for its journal to
// close on the way out.
const journalCloseTimeout = 2 * time.Minute

// closeJournal closes j, giving up after timeout: Badger retries a failed
// memtable flush forever (the state directory deleted or unwritable under
// a running daemon), and a daemon must still exit then. To the journal,
// giving up is a crash, which it is built to survive (the durability
// contract in DESIGN.md): the next open recovers it.
func closeJournal(j *journal.Journal, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- j.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("%w: the journal did not close within %v (is its directory gone or unwritable?); the next mount recovers it as after a crash", ErrBusy, timeout)
	}
}

// prefixLogf prefixes the store's warnings as the daemon's own messages
// are.
func prefixLogf(logf func(string, ...any)) func(string, ...any) {
	return func(format string, args ...any) { logf("cairn: warning: "+format, args...) }
}
