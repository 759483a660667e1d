package journal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/journal/internal/metalog"
	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/cairnfs/cairn/chunkstore"
)

// Config configures Open. Dir, Store and Workspace are required.
type Config struct {
	// Dir is the journal's state directory (Badger metadata and staging
	// files), created if missing. One journal per directory.
	Dir string
	// Store is where snapshots are read from and written to.
	Store *chunkstore.Store
	// Workspace names the workspace (chunkstore.ValidWorkspaceName).
	Workspace string
	// From is the snapshot a new journal starts from (a fork). Zero: the
	// workspace's head, or an empty workspace if it has none. Ignored when
	// Dir already holds the workspace's journal.
	From chunkstore.ID
	// NoReconcile opens the journal as it is even if the workspace's head
	// in the store moved away from its base: for callers that reset it
	// (Rollback) or only read it (a diff of the live state). Default: Open
	// reconciles (reconcile.go): it rebases a journal without changes onto
	// the head, and refuses one with changes with a *DivergedError.
	NoReconcile bool
	// Clock returns the current time in ns since the Unix epoch. Default:
	// the system clock. Tests inject a deterministic one.
	Clock func() int64
	// Host and Version are recorded in snapshot records.
	Host, Version string
	// MaxBytes and MaxInodes are the workspace's quotas: the total size of
	// its regular files, and its number of inodes. 0: unlimited.
	MaxBytes, MaxInodes uint64
	// Logf receives messages for operators (a quota reached). Default: none.
	Logf func(format string, args ...any)
	// Invalidator is told which kernel caches to drop when the journal
	// changes the tree by itself (Rollback). Default: none.
	Invalidator Invalidator
	// FS is the filesystem staging files live on. Default: OSFS. Tests
	// wrap it to inject faults.
	FS FS
}

// Journal is the live state of one workspace: metadata in Badger, data of
// changed files in staging files. All POSIX semantics live here. Safe for
// concurrent use; operations are serialised (see doc.go).
type Journal struct {
	cfg   Config
	db    *metalog.DB
	store *chunkstore.Store

	// snapMu serialises snapshots and what must not run during one
	// (rollback, restore, LiveTree, Close); taken before mu.
	snapMu  sync.Mutex
	mu      sync.Mutex
	cut     *cutState // the running snapshot's cut (cut.go), under mu
	cutCond sync.Cond // on mu: a frozen file was read, or the cut ended
	// staleUpdates: a commit's spilled records (updateKey) may be left in
	// the journal (one did not finish, or the journal just opened); the
	// next commit drops them first. Under snapMu.
	staleUpdates bool
	closed       bool
	m            meta
	staging      string          // staging directory of the current epoch
	ref          *chunkstore.Ref // the workspace's ref as last read or written; nil: none yet
	files        map[Ino]File    // open staging files

	loadedDirs map[Ino]struct{}     // directories known to be loaded in this epoch
	bg         sync.WaitGroup       // background cleanup (dropEpochLater)
	cache      inodeCache           // decoded inode records of this epoch
	trimmed    map[Ino]struct{}     // staging files known to hold no bytes past Size
	opens      map[Ino]int          // open handles per inode (handle.go)
	writers    map[Ino]*writerState // inodes open for passthrough writing
	prog       progress             // of the running snapshot or restore
	readOnly   error                // non-nil: changes are refused (SetReadOnly)
	space      *space               // the full-disk guard (space.go)
	stopWatch  chan struct{}        // stops space.watch
	watched    chan struct{}        // closed when space.watch returned
	reserved   int                  // > 0: the running operation may use the disk's reserve

	generation atomic.Uint64 // rollbacks since Open (Generation)
}

// Generation counts the rollbacks since Open. Each moves the live state to
// a new namespace in which an inode number may name another file than
// before (a file's number comes from the snapshot), so a FUSE server gives
// it as the inode generation: the kernel then drops its inodes of the old
// state instead of serving their cached pages and backing files under the
// same number. Read it before the operation whose inode numbers it goes
// with. It changes under the journal's lock, before any inode of the new
// state can be looked up.
func (j *Journal) Generation() uint64 { return j.generation.Load() }

// meta is the journal's global state, kept under "m" keys.
type meta struct {
	Workspace string
	Epoch     uint32        // namespace of the live state (keys.go)
	Base      chunkstore.ID // snapshot the live state derives from (zero: none)
	Seq       uint64        // Seq of the workspace's last snapshot
	Gen       uint64        // dirty markers written now carry this generation
	Committed uint64        // markers <= Committed are clean (already in Base)
	NextIno   uint64        // next inode number to allocate (never reused)
	Pending   chunkstore.ID // a snapshot being committed (zero: none)
	// Diverged is the snapshot that keeps this journal's changes since
	// Base after the workspace's head moved elsewhere to DivergedHead
	// (zero: none). See reconcile.go.
	Diverged, DivergedHead chunkstore.ID
	// RollbackPending says that the live state was reset to Pending by a
	// rollback whose ref move (from RollbackFrom; zero: no ref) may not
	// have happened: Open finishes it (resolvePending).
	RollbackPending bool
	RollbackFrom    chunkstore.ID
	Bytes           uint64 // total size of regular files (quota)
	Files           uint64 // regular files
	Dirs            uint64 // directories, the root excluded
	Symlinks        uint64 // symbolic links
	Others          uint64 // FIFOs, sockets, devices
}

// inodes is the number of inodes, the root included (the inode quota).
func (m *meta) inodes() uint64 { return 1 + m.Files + m.Dirs + m.Symlinks + m.Others }

// count returns the counter of inodes of type t.
func (m *meta) count(t Type) *uint64 {
	switch t {
	case TypeRegular:
		return &m.Files
	case TypeDir:
		return &m.Dirs
	case TypeSymlink:
		return &m.Symlinks
	}
	return &m.Others
}

// Open opens (or creates) the journal of cfg.Workspace in cfg.Dir.
func Open(ctx context.Context, cfg Config) (*Journal, error) {
	if cfg.Dir == "" || cfg.Store == nil {
		return nil, fmt.Errorf("%w: journal config needs Dir and Store", ErrInvalid)
	}
	if err := chunkstore.ValidWorkspaceName(cfg.Workspace); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = func() int64 { return time.Now().UnixNano() }
	}
	if cfg.FS == nil {
		cfg.FS = OSFS{}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create journal directory: %w", err)
	}
	metaDir := filepath.Join(cfg.Dir, "meta")
	if err := repairBadger(metaDir); err != nil {
		return nil, err
	}
	opts := badgerOptions(metaDir)
	sp := newSpace(cfg.Dir, metaDir, opts, cfg.Logf)
	if err := sp.open(); err != nil {
		return nil, err
	}
	db, err := metalog.Open(metalog.Options{
		Dir:    filepath.Join(cfg.Dir, "metalog"),
		Badger: opts,
		// Checkpoints write Badger's tables through mmap: guarded like
		// any Badger write, and allowed the reserve (they are what lets
		// the log shrink).
		CheckpointGate: func(bytes int64) error { return sp.check(uint64(bytes)*2, true) },
		Logf:           cfg.Logf,
	})
	if err != nil {
		return nil, fmt.Errorf("open journal metadata in %s: %w", cfg.Dir, err)
	}
	j := &Journal{cfg: cfg, db: db, staleUpdates: true, store: cfg.Store, files: make(map[Ino]File), loadedDirs: make(map[Ino]struct{}), cache: newInodeCache(), trimmed: make(map[Ino]struct{}),
		opens: make(map[Ino]int), writers: make(map[Ino]*writerState), space: sp}
	j.cutCond.L = &j.mu
	if err := sp.refresh(); err != nil {
		db.Close()
		return nil, err
	}
	// Opening (initialising, finishing an interrupted snapshot, recovering
	// handles) must work on a full disk: it may use the reserve.
	j.reserved++
	defer func() { j.reserved-- }()
	if err := j.open(ctx); err != nil {
		db.Close()
		return nil, err
	}
	j.stopWatch, j.watched = make(chan struct{}), make(chan struct{})
	go func() { defer close(j.watched); sp.watch(j.stopWatch) }()
	return j, nil
}

// repairBadger removes what a kill -9 during Badger's own start-up leaves
// and Badger v4 cannot reopen: a value-log or memtable file created but not
// yet initialised (zero bytes). Badger's vlog.open treats such a file as fatal
// ("Open existing file ... Create a new file", the z.NewFile sentinel of
// OpenMmapFile), although it holds nothing: entries are written only after
// the file's header. Found by the journal's crash tests.
func repairBadger(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read journal metadata directory: %w", err)
	}
	for _, e := range entries {
		// Memtable files (.mem) have the same problem in Badger v4
		// (dgraph-io/badger#2207): created, then killed before sized.
		if ext := filepath.Ext(e.Name()); ext != ".vlog" && ext != ".mem" {
			continue
		}
		info, err := e.Info()
		if err == nil && info.Size() == 0 {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove empty value log %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// badgerOptions tunes Badger for many small keys and a small footprint: a
// journal lives beside a running sandbox, not on a database server.
func badgerOptions(dir string) badger.Options {
	return badger.DefaultOptions(dir).
		WithLogger(nil).
		WithSyncWrites(false). // the WAL survives kill -9; Fsync syncs for power loss
		WithDetectConflicts(false).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(8 << 20).
		WithValueLogFileSize(64 << 20).
		WithNumCompactors(2).
		// No block compression: the metadata is small records, and
		// Badger's table builders compress in buffers of their own that
		// were most of the daemon's heap under fsbench's memory load
		// (anonymous peak 1.3-1.6 GiB -> 0.9-1.0 GiB without).
		WithCompression(options.None)
}

func (j *Journal) open(ctx context.Context) error {
	ok, err := j.loadMeta()
	if err != nil {
		return err
	}
	if !ok {
		if err := j.initialize(ctx); err != nil {
			return err
		}
	} else if j.m.Workspace != j.cfg.Workspace {
		return fmt.Errorf("%w: journal in %s belongs to workspace %q, not %q", ErrInvalid, j.cfg.Dir, j.m.Workspace, j.cfg.Workspace)
	}
	ref, err := j.store.Ref(ctx, j.cfg.Workspace)
	switch {
	case err == nil:
		j.ref = &ref
	case errors.Is(err, chunkstore.ErrNotFound):
	default:
		return fmt.Errorf("read ref of %q: %w", j.cfg.Workspace, err)
	}
	if !j.m.Pending.IsZero() {
		if err := j.resolvePending(); err != nil {
			return err
		}
	}
	if err := j.loadDirty(); err != nil {
		return fmt.Errorf("%w: read the dirty set: %v", ErrIO, err)
	}
	j.staging = filepath.Join(j.cfg.Dir, "staging", fmt.Sprint(j.m.Epoch))
	if err := os.MkdirAll(j.staging, 0o700); err != nil {
		return fmt.Errorf("create staging directory: %w", err)
	}
	if err := j.recoverHandles(); err != nil {
		return err
	}
	if err := j.cleanup(); err != nil {
		return err
	}
	return j.reconcile(ctx)
}

// initialize creates the journal's state from its base snapshot.
func (j *Journal) initialize(ctx context.Context) error {
	base := j.cfg.From
	if base.IsZero() {
		ref, err := j.store.Ref(ctx, j.cfg.Workspace)
		switch {
		case err == nil:
			base = ref.Snapshot
		case !errors.Is(err, chunkstore.ErrNotFound):
			return fmt.Errorf("read ref of %q: %w", j.cfg.Workspace, err)
		}
	}
	j.m = meta{Workspace: j.cfg.Workspace, Epoch: 1, Gen: 1, NextIno: uint64(RootIno) + 1}
	root, xattrs, err := j.rootFrom(ctx, base)
	if err != nil {
		return err
	}
	return j.write(func(txn *metalog.Txn) error {
		if err := j.putInode(txn, root); err != nil {
			return err
		}
		for _, x := range xattrs {
			if err := txn.Set(xattrKey(j.m.Epoch, RootIno, x.Name), x.Value); err != nil {
				return err
			}
		}
		return j.saveMeta(txn)
	})
}

// rootFrom sets j.m for a fresh epoch based on snapshot base (zero: an empty
// workspace) and returns the root inode and its xattrs.
func (j *Journal) rootFrom(ctx context.Context, base chunkstore.ID) (*inode, []chunkstore.Xattr, error) {
	now := j.cfg.Clock()
	root := &inode{Attr: Attr{Ino: RootIno, Type: TypeDir, Mode: 0o755, Nlink: 2, Atime: now, Mtime: now, Ctime: now}, Parent: RootIno, Loaded: true}
	j.m.Base, j.m.Seq, j.m.Bytes = base, 0, 0
	j.m.Files, j.m.Dirs, j.m.Symlinks, j.m.Others = 0, 0, 0, 0
	if base.IsZero() {
		return root, nil, nil
	}
	snap, err := j.store.Snapshot(ctx, base)
	if err != nil {
		return nil, nil, fmt.Errorf("open workspace %q at snapshot %s: %w", j.cfg.Workspace, base.Short(), err)
	}
	return j.rootOf(base, snap)
}

// rootOf is rootFrom with the base snapshot's record already read.
func (j *Journal) rootOf(base chunkstore.ID, snap *chunkstore.Snapshot) (*inode, []chunkstore.Xattr, error) {
	now := j.cfg.Clock()
	root := &inode{Attr: Attr{Ino: RootIno, Type: TypeDir, Mode: 0o755, Nlink: 2, Atime: now, Mtime: now, Ctime: now}, Parent: RootIno, Loaded: true}
	j.m.Base, j.m.Seq, j.m.Bytes = base, 0, 0
	j.m.Files, j.m.Dirs, j.m.Symlinks, j.m.Others = 0, 0, 0, 0
	if snap.Workspace == j.cfg.Workspace {
		j.m.Seq = snap.Seq
	}
	j.m.NextIno = max(j.m.NextIno, snap.NextIno)
	st := snap.Stats
	j.m.Bytes, j.m.Files, j.m.Symlinks, j.m.Others = st.Bytes, st.Files, st.Symlinks, st.Others
	j.m.Dirs = max(st.Dirs, 1) - 1 // the record counts the root
	ra := snap.RootAttr
	root.Mode, root.UID, root.GID = ra.Mode, ra.UID, ra.GID
	root.Atime, root.Mtime, root.Ctime = ra.Atime, ra.Mtime, ra.Ctime
	root.Tree, root.Loaded = snap.Root, false
	root.Nlink = 0 // computed when loaded: 2 + subdirectories
	root.HasXattrs = len(ra.Xattrs) > 0
	return root, ra.Xattrs, nil
}

// Close closes the journal. Everything written so far is in the journal
// (and survives); it is not snapshotted.
func (j *Journal) Close() error {
	j.snapMu.Lock()
	defer j.snapMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	j.cache.noXattrs.clear(true)
	j.bg.Wait()
	var errs []error
	for ino, f := range j.files {
		errs = append(errs, f.Close())
		delete(j.files, ino)
	}
	close(j.stopWatch)
	<-j.watched
	j.space.close()
	errs = append(errs, j.db.Close())
	return errors.Join(errs...)
}

// Store returns the store the journal commits to.
func (j *Journal) Store() *chunkstore.Store { return j.store }

// Workspace returns the workspace's name.
func (j *Journal) Workspace() string { return j.cfg.Workspace }

// Base returns the snapshot the live state derives from (zero: none).
func (j *Journal) Base() chunkstore.ID {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.m.Base
}

// lock takes the journal's lock for an operation.
func (j *Journal) lock() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// lockAll is lock for an operation that reads the sizes of all inodes
// (snapshot, diff, status, statfs, rollback, restore): the records of files
// open for passthrough writing are brought up to date first. Other
// operations adopt a writer's size only for the inodes they touch (adopt):
// scanning every writer on every request cost most of the daemon's CPU
// when many files were open for writing.
func (j *Journal) lockAll() error {
	if err := j.lock(); err != nil {
		return err
	}
	if err := j.syncWriters(); err != nil {
		j.mu.Unlock()
		return err
	}
	return nil
}

// lockW is lock for an operation that changes the tree: refused with
// ErrReadOnly once SetReadOnly was called.
func (j *Journal) lockW() error {
	if err := j.lock(); err != nil {
		return err
	}
	if j.readOnly != nil {
		err := j.readOnly
		j.mu.Unlock()
		return err
	}
	return nil
}

// SetReadOnly makes every later operation that would change the tree fail
// with an error wrapping ErrReadOnly and why (the daemon's lease was taken
// over by another machine: DESIGN.md, durability contract 5). Reads go on;
// so do writes through handles opened for writing before (passthrough
// writes never reach the journal): they stay in the journal, never in the
// workspace's history unless a later mount keeps them (reconcile.go).
// Snapshots are the caller's to refuse.
func (j *Journal) SetReadOnly(why error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.readOnly == nil {
		j.readOnly = fmt.Errorf("%w: %w", ErrReadOnly, why)
	}
}

// ReadOnly returns why the journal is read-only (nil: it is not).
func (j *Journal) ReadOnly() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.readOnly
}

// Status returns the journal's state. O(dirty).
func (j *Journal) Status(ctx context.Context) (Status, error) {
	if err := j.lockAll(); err != nil {
		return Status{}, err
	}
	defer j.mu.Unlock()
	// During a snapshot, what it is committing is dirty until it is done.
	dirty := j.cache.dirty
	if j.cut != nil {
		dirty = maps.Clone(j.cut.frozen)
		maps.Copy(dirty, j.cache.dirty)
	}
	s := Status{Workspace: j.cfg.Workspace, Base: j.m.Base, Seq: j.m.Seq, DirtyInodes: len(dirty),
		Files: j.m.Files, Bytes: j.m.Bytes, Inodes: j.m.inodes(), OpenFiles: len(j.opens)}
	err := j.db.View(func(txn *metalog.Txn) error {
		for ino := range dirty {
			n, err := j.getInode(txn, ino)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if n.Type == TypeRegular {
				s.DirtyBytes += n.Size
			}
		}
		return nil
	})
	return s, err
}
