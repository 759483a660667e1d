package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/journal/internal/metalog"

	"github.com/cairnfs/cairn/chunkstore"
)

// SnapshotOptions describe a snapshot.
type SnapshotOptions struct {
	Message    string
	Labels     map[string]string
	Provenance map[string]string
	// Excluded lists what a policy kept out of the snapshot (cairn run's
	// secret files), recorded so that nothing is left out silently.
	Excluded []chunkstore.Exclusion
	// Egress is the turn's egress log (cairn run with a policy).
	Egress *chunkstore.Egress
}

// Snapshot commits the live state as a new snapshot of the workspace and
// moves the workspace's ref to it. The cut is consistent: every operation
// that returned before Snapshot took the journal's lock is in it and none
// that starts later is; the reading, chunking and packing happen after the
// cut, without the lock (cut.go), so the mount keeps serving. The work is
// O(changed): only directories on a path to a change get new trees, only
// changed files are read and chunked.
//
// Order, for the durability contract: blobs and index, then the snapshot
// record (chunkstore.PutSnapshot), then a pending marker in the journal,
// then the ref (compare-and-swap), then the journal's own records. A crash
// at any point leaves a journal that reopens to the state before or after
// the snapshot (see resolvePending).
func (j *Journal) Snapshot(ctx context.Context, opts SnapshotOptions) (chunkstore.ID, error) {
	j.snapMu.Lock()
	defer j.snapMu.Unlock()
	if err := j.lockAll(); err != nil {
		return chunkstore.ID{}, err
	}
	// A snapshot writes packs, to a local store or an outbox that is
	// usually on the journal's disk: that is an ordinary write, refused
	// on a full disk before it starts. Recording the snapshot in the
	// journal once it is in the store may use the reserve.
	if err := j.space.check(0, false); err != nil {
		j.mu.Unlock()
		return chunkstore.ID{}, fmt.Errorf("snapshot of %q: %w", j.cfg.Workspace, err)
	}
	j.prog.start("snapshot")
	defer j.prog.done()
	cut := j.cutLocked(false)
	j.mu.Unlock()
	if afterCut != nil {
		afterCut()
	}
	snap, c, err := j.buildSnapshot(ctx, opts, cut)
	j.mu.Lock()
	defer j.mu.Unlock()
	committed := false
	defer func() { j.endCut(cut, committed) }()
	if err != nil {
		return chunkstore.ID{}, err
	}
	defer j.useReserve()()
	id, _, err := j.commitSnapshot(ctx, snap, c, false)
	committed = err == nil // else the frozen set stays dirty (pendingIsBase, keepDiverged)
	return id, err
}

// committer builds the trees of one snapshot. It reads the journal's
// records through txn only (not the inode cache, which operations change
// meanwhile), and the dirty set given (the cut's frozen one).
type committer struct {
	j       *Journal
	ctx     context.Context
	txn     *metalog.Txn
	cut     *cutState        // nil: LiveTree, under the lock
	epoch   uint32           // of the records read
	dirty   map[Ino]struct{} // what changed since the base
	changes []chunkstore.Change
	stats   chunkstore.SnapshotStats
	counted map[uint64]bool // inodes counted in ChangedFiles (hardlinks: once)

	// Operations store frozen files too (thaw, on their goroutines):
	mu      sync.Mutex
	files   map[Ino]committedFile // dirty files ingested in this commit that may be asked again (hardlinks, thaw)
	updates []*inode              // records to save after the ref moved, not in the journal (spill)
	upBytes int                   // their encoded size
	spilled bool                  // some are in the journal
	err     error                 // why an operation's read of a frozen file failed
}

// The records a commit saves once its snapshot is the head wait in the
// journal (updateKey) once they pass spillBytes, not in memory: a commit
// of 100k new small files would otherwise hold all their bytes until the
// end. They are written in transactions of about spillBytes; a small
// commit keeps its few in memory (reading back keys deleted by earlier
// commits means skipping their tombstones: 35 ms per snapshot after a
// 100k-file commit).
const spillBytes = 1 << 20

// fail records why the snapshot cannot be: its first error.
func (c *committer) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// update notes up, a record to save once the snapshot is the head. A
// commit that makes no snapshot (LiveTree) keeps none.
func (c *committer) update(up *inode) {
	if c.cut == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates = append(c.updates, up)
	c.upBytes += up.sizeHint() + 20 // and its key
	if c.upBytes >= spillBytes {
		c.spillLocked()
	}
}

// spillLocked writes the updates held in memory to the journal, with c.mu
// held. Written beside the operations (the log serialises them), not
// through j.write: they are no inode records, the cache has nothing to do.
func (c *committer) spillLocked() {
	if len(c.updates) == 0 || c.err != nil {
		c.updates, c.upBytes = c.updates[:0], 0
		return
	}
	// A write batch: records of big files (long chunk lists) may pass a
	// transaction's limit, and these need not be atomic (a commit that
	// does not finish has its spilled records dropped, staleUpdates).
	err := c.j.space.check(uint64(c.upBytes), true)
	if err == nil {
		wb := c.j.db.NewWriteBatch()
		for _, up := range c.updates {
			if err = wb.Set(updateKey(c.epoch, up.Ino), up.encode()); err != nil {
				break
			}
		}
		if err == nil {
			err = wb.Flush()
		} else {
			wb.Cancel()
		}
	}
	if err != nil {
		c.err = fmt.Errorf("keep the records of the snapshot: %w", err)
	}
	c.spilled = true
	clear(c.updates)
	c.updates, c.upBytes = c.updates[:0], 0
}

// failed returns why an operation's read for the commit failed, or a
// spill did.
func (c *committer) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// dropUpdates deletes the records a commit that did not finish left in
// the journal.
func (j *Journal) dropUpdates(epoch uint32) error {
	var keys [][]byte
	err := j.db.View(func(txn *metalog.Txn) error {
		it := txn.NewIterator(metalog.IteratorOptions{Prefix: updatePrefix(epoch)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil || len(keys) == 0 {
		return err
	}
	wb := j.db.NewWriteBatch()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			wb.Cancel()
			return err
		}
	}
	return wb.Flush()
}

func (j *Journal) newCommitter(ctx context.Context, cut *cutState) *committer {
	c := &committer{j: j, ctx: ctx, cut: cut, epoch: j.m.Epoch, dirty: j.cache.dirty,
		files: make(map[Ino]committedFile), counted: make(map[uint64]bool)}
	if cut != nil {
		c.txn, c.epoch, c.dirty = cut.txn, cut.epoch, cut.frozen
	}
	return c
}

// inode reads ino's record as of the committer's transaction.
func (c *committer) inode(ino Ino) (*inode, error) { return readInode(c.txn, c.epoch, ino) }

func (c *committer) isDirty(ino Ino) bool {
	_, ok := c.dirty[ino]
	return ok
}

// snapshotLocked takes a snapshot with the journal's lock held throughout
// (rollback and restore take one of the state they replace). A detached snapshot only reaches the
// store: the ref does not move and the journal's state is not touched (the

// LiveTree stores the trees of the live state (and the content of its
// dirty files) and returns the root tree's ID, without making a snapshot:
// what `cairn diff` compares a snapshot with. O(changed) like Snapshot;
// the next snapshot finds the blobs stored already.
func (j *Journal) LiveTree(ctx context.Context) (chunkstore.ID, error) {
	j.snapMu.Lock()
	defer j.snapMu.Unlock()
	if err := j.lockAll(); err != nil {
		return chunkstore.ID{}, err
	}
	defer j.mu.Unlock()
	c := j.newCommitter(ctx, nil)
	var rootTree chunkstore.ID
	err := j.db.View(func(txn *metalog.Txn) error {
		c.txn = txn
		root, err := c.inode(RootIno)
		if err != nil {
			return err
		}
		rootTree, err = c.dir(root, "")
		return err
	})
	if err == nil {
		err = j.store.Flush(ctx)
	}
	if err != nil {
		return chunkstore.ID{}, fmt.Errorf("trees of the live state of %q: %w", j.cfg.Workspace, err)
	}
	return rootTree, nil
}

// state before a rollback, which the rollback is about to discard).
func (j *Journal) snapshotLocked(ctx context.Context, opts SnapshotOptions, detached bool) (id chunkstore.ID, snap *chunkstore.Snapshot, err error) {
	j.prog.start("snapshot")
	defer j.prog.done()
	cut := j.cutLocked(true)
	defer func() { j.endCut(cut, !detached && err == nil) }()
	snap, c, err := j.buildSnapshot(ctx, opts, cut)
	if err != nil {
		return chunkstore.ID{}, nil, err
	}
	return j.commitSnapshot(ctx, snap, c, detached)
}

// commitSnapshot stores snap, built from a cut by c, and makes it the
// workspace's head (unless detached), with the journal's lock held. A
// non-zero ID with an error: the ref moved, but the journal's records of
// it did not all follow (pendingIsBase).
func (j *Journal) commitSnapshot(ctx context.Context, snap *chunkstore.Snapshot, c *committer, detached bool) (chunkstore.ID, *chunkstore.Snapshot, error) {
	if j.closed {
		return chunkstore.ID{}, nil, ErrClosed
	}
	// A workspace's ref moves only from the head the new snapshot's parent
	// is: if the store's head is another snapshot (another machine moved
	// it since this journal last caught up), this one cannot become the
	// head. It is kept (see keepDiverged) and the caller is told.
	if !detached && j.ref != nil && j.ref.Snapshot != j.m.Base {
		return chunkstore.ID{}, nil, j.keepDiverged(ctx, snap, j.ref.Snapshot)
	}
	id, err := j.store.PutSnapshot(ctx, snap)
	if err != nil {
		return chunkstore.ID{}, nil, fmt.Errorf("snapshot of %q: %w", j.cfg.Workspace, err)
	}
	if detached {
		return id, snap, nil
	}
	j.m.Pending = id
	if err := j.update(func(*metalog.Txn) error { return nil }); err != nil {
		return chunkstore.ID{}, nil, err
	}
	ref, err := j.store.SetRef(ctx, j.cfg.Workspace, id, j.ref)
	if err != nil {
		j.m.Pending = chunkstore.ID{}
		_ = j.update(func(*metalog.Txn) error { return nil })
		if errors.Is(err, chunkstore.ErrConflict) {
			// Lost the compare-and-swap: another writer moved the ref.
			// The snapshot is in the store; keep it on record.
			if head, herr := j.store.Ref(ctx, j.cfg.Workspace); herr == nil {
				j.ref = &head
				return chunkstore.ID{}, nil, j.recordDiverged(ctx, id, head.Snapshot)
			}
		}
		return chunkstore.ID{}, nil, fmt.Errorf("snapshot of %q: %w", j.cfg.Workspace, err)
	}
	j.ref = &ref
	// The snapshot is done. Bring the journal's records up to date: the
	// new tree IDs and file contents become the base of the next commit.
	// They take as many transactions as they need: until Pending is
	// cleared below, a crash leaves resolvePending to make the snapshot
	// the base and keep the dirty set dirty, which does not rely on them.
	err = j.saveUpdates(c)
	if err != nil {
		j.pendingIsBase(id, snap.Seq)
		return id, snap, fmt.Errorf("%w: snapshot %s is done, but recording it in the journal failed: %v", ErrIO, id.Short(), err)
	}
	j.m.Base, j.m.Seq, j.m.Pending = id, snap.Seq, chunkstore.ID{}
	j.m.Diverged, j.m.DivergedHead = chunkstore.ID{}, chunkstore.ID{}
	j.m.Committed = c.cut.gen // the cut moved Gen on: what changed since is dirty still
	if err := j.update(func(*metalog.Txn) error { return nil }); err != nil {
		j.pendingIsBase(id, snap.Seq)
		return id, snap, fmt.Errorf("snapshot %s is done, but recording it in the journal failed: %w", id.Short(), err)
	}
	// The markers of this commit are stale now; delete them so that the
	// dirty scan at Open stays O(dirty). (A failure leaves harmless stale
	// markers: Open ignores markers at or below Committed.)
	if j.space.check(uint64(len(c.dirty))*64, true) == nil {
		wb := j.db.NewWriteBatch()
		for ino := range c.dirty {
			if j.isDirty(ino) {
				continue // changed since the cut: its marker is of the new generation
			}
			if wb.Delete(dirtyKey(j.m.Epoch, ino)) != nil {
				break
			}
		}
		_ = wb.Flush()
	}
	// Files open for passthrough writing stay dirty: the kernel may write
	// them without telling the journal.
	if len(j.writers) > 0 {
		err := j.update(func(txn *metalog.Txn) error {
			for ino := range j.writers {
				n, err := j.getInode(txn, ino)
				if err != nil {
					return err
				}
				if err := j.markDirty(txn, n); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return id, snap, fmt.Errorf("snapshot %s is done, but marking open files dirty failed: %w", id.Short(), err)
		}
	}
	return id, snap, nil
}

// saveUpdates brings the journal's records up to date with a commit's
// updates, in as many transactions as they need: those spilled to the
// journal first (deleted as they are applied; they are the older), then
// those in memory.
func (j *Journal) saveUpdates(c *committer) error {
	var it *metalog.Iterator
	if c.spilled {
		rtxn := j.db.NewTransaction(false)
		defer rtxn.Discard()
		it = rtxn.NewIterator(metalog.IteratorOptions{Prefix: updatePrefix(c.epoch), PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
	}
	err := j.writeSplit(func(w *splitWriter) error {
		i := 0
		apply := func(up *inode) error {
			if i > 0 && i%loadBatch == 0 {
				if err := w.next(); err != nil {
					return err
				}
			}
			i++
			n, ok, err := j.committedRecord(w.txn, up)
			if err != nil || !ok {
				return err
			}
			return w.putInode(n)
		}
		if it != nil {
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().Key()
				if len(k) != 14 {
					continue
				}
				ino := Ino(binary.BigEndian.Uint64(k[6:]))
				var up *inode
				err := it.Item().Value(func(v []byte) error {
					var err error
					up, err = decodeInode(ino, v)
					return err
				})
				if err != nil {
					return err
				}
				if err := w.delete(it.Item().KeyCopy(nil)); err != nil {
					return err
				}
				if err := apply(up); err != nil {
					return err
				}
			}
		}
		for _, up := range c.updates {
			if err := apply(up); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		j.staleUpdates = false
	}
	return err
}

// committedRecord returns the record to save for up, which a commit built
// from the record the cut saw, and whether there is one: the current record
// with up's tree (a directory) or content (a file that did not change since
// the cut: one that did keeps its record and stays dirty), none for an
// inode deleted since.
func (j *Journal) committedRecord(txn *metalog.Txn, up *inode) (*inode, bool, error) {
	n, err := j.getInode(txn, up.Ino)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	switch {
	case n.Type == TypeDir:
		// Its tree as of the cut is the right base for the next commit's
		// diff and for the entries of children unchanged since.
		n.Tree = up.Tree
	case j.isDirty(n.Ino):
		return nil, false, nil
	default:
		n.Inline, n.Chunks, n.ChunkLists = up.Inline, up.Chunks, up.ChunkLists
	}
	return n, true, nil
}

// buildSnapshot stores the trees (and the content of dirty files) of the
// cut and returns the snapshot record that names them, not stored yet,
// with the committer that built it (its updates are the journal's records
// to bring up to date once the snapshot is the head). Unless the cut is
// locked, it runs without the journal's lock.
func (j *Journal) buildSnapshot(ctx context.Context, opts SnapshotOptions, cut *cutState) (*chunkstore.Snapshot, *committer, error) {
	before := j.store.Stats()
	// Records of a commit that did not finish (a failed snapshot, a
	// crash) must not be mistaken for this one's.
	if j.staleUpdates {
		if err := j.dropUpdates(cut.epoch); err != nil {
			return nil, nil, fmt.Errorf("snapshot of %q: %w", j.cfg.Workspace, err)
		}
		j.staleUpdates = false
	}
	c := j.newCommitter(ctx, cut)
	if !cut.locked {
		j.mu.Lock()
		cut.com = c // operations may read frozen files for it now (thaw)
		j.mu.Unlock()
	}
	defer c.walked()
	var rootTree chunkstore.ID
	root, err := c.inode(RootIno)
	var rootXattrs []chunkstore.Xattr
	if err == nil {
		rootXattrs, err = c.xattrs(RootIno)
	}
	if err == nil {
		rootTree, err = c.dir(root, "")
	}
	c.walked()                 // and what operations read for it is in c.files too
	j.staleUpdates = c.spilled // until saveUpdates has them all
	if err == nil {
		err = c.failed()
	}
	if err == nil && !cut.locked {
		// Packs and index out and synced now, not under the lock
		// (PutSnapshot flushes what is left).
		err = j.store.Flush(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot of %q: %w", j.cfg.Workspace, err)
	}
	after := j.store.Stats()
	m := cut.meta
	c.stats.Files, c.stats.Dirs, c.stats.Symlinks, c.stats.Others = m.Files, m.Dirs+1, m.Symlinks, m.Others // Dirs counts the root
	c.stats.Bytes = m.Bytes
	c.stats.NewBlobs = after.NewBlobs - before.NewBlobs
	c.stats.NewBytes = after.NewStoredBytes - before.NewStoredBytes
	now := j.cfg.Clock()
	snap := &chunkstore.Snapshot{
		Root: rootTree,
		RootAttr: chunkstore.RootAttr{Mode: root.Mode, UID: root.UID, GID: root.GID,
			Atime: root.Atime, Mtime: root.Mtime, Ctime: root.Ctime, Xattrs: rootXattrs},
		NextIno:      m.NextIno,
		Workspace:    j.cfg.Workspace,
		Seq:          m.Seq + 1,
		Time:         time.Unix(0, now).UTC(),
		Message:      opts.Message,
		Labels:       opts.Labels,
		Host:         j.cfg.Host,
		CairnVersion: j.cfg.Version,
		Provenance:   opts.Provenance,
		Stats:        c.stats,
		Changes:      c.changes,
		Excluded:     opts.Excluded,
		Egress:       opts.Egress,
	}
	if !m.Base.IsZero() {
		snap.Parents = []chunkstore.ID{m.Base}
	}
	return snap, c, nil
}

// resolvePending finishes or forgets a snapshot that was being committed
// when the journal stopped. If the ref points at it, it happened: it becomes
// the base, but the dirty set stays dirty (the journal's records may not all
// have been updated), so the next snapshot re-reads those files, which
// dedupe to the same chunks. Otherwise it never became the head: forget it.
func (j *Journal) resolvePending() error {
	pending := j.m.Pending
	j.m.Pending = chunkstore.ID{}
	if j.m.RollbackPending {
		return j.resolveRollback(pending)
	}
	if j.ref != nil && j.ref.Snapshot != pending && j.ref.Snapshot != j.m.Base {
		// The head moved on since: if it moved on from this snapshot, the
		// snapshot happened (and reconcile rebases onto the head).
		if ok, err := j.store.IsAncestor(context.Background(), pending, j.ref.Snapshot); err == nil && ok {
			j.m.Base = pending
		}
	}
	if j.ref != nil && (j.ref.Snapshot == pending || j.m.Base == pending) {
		snap, err := j.store.Snapshot(context.Background(), pending)
		if err != nil {
			return fmt.Errorf("finish interrupted snapshot %s: %w", pending.Short(), err)
		}
		j.m.Base, j.m.Seq = pending, snap.Seq
	}
	return j.update(func(*metalog.Txn) error { return nil })
}

// resolveRollback finishes a rollback to snapshot to whose ref move may
// not have happened when the journal stopped: the live state is at to
// already. If the ref is still where the rollback found it, it moves now;
// if it moved elsewhere meanwhile, the rollback lost, and reconcile
// rebases the (clean) journal onto the new head.
func (j *Journal) resolveRollback(to chunkstore.ID) error {
	from := j.m.RollbackFrom
	j.m.RollbackPending, j.m.RollbackFrom = false, chunkstore.ID{}
	ctx := context.Background()
	if (j.ref == nil && from.IsZero()) || (j.ref != nil && j.ref.Snapshot == from && from != to) {
		ref, err := j.store.SetRef(ctx, j.cfg.Workspace, to, j.ref)
		switch {
		case err == nil:
			j.ref = &ref
			if err := j.store.ForgetLost(ctx, j.cfg.Workspace, to); err != nil {
				j.cfg.Logf("cairn: %v", err)
			}
			j.cfg.Logf("cairn: finished the interrupted rollback of %q to %s", j.cfg.Workspace, to.Short())
		case errors.Is(err, chunkstore.ErrConflict):
			if head, herr := j.store.Ref(ctx, j.cfg.Workspace); herr == nil {
				j.ref = &head
			}
		default:
			return fmt.Errorf("finish the interrupted rollback of %q to %s: %w", j.cfg.Workspace, to.Short(), err)
		}
	}
	return j.update(func(*metalog.Txn) error { return nil })
}

// pendingIsBase is what the journal does in memory when the bookkeeping
// after snapshot id moved the ref fails: what resolvePending does at the
// next Open. The snapshot is the base (the next one is its child, so the
// history keeps it) and the dirty set stays dirty (the records may not
// all be up to date). Pending stays set on disk and in memory, so a later
// Open resolves it the same way.
func (j *Journal) pendingIsBase(id chunkstore.ID, seq uint64) {
	j.m.Base, j.m.Seq, j.m.Pending = id, seq, id
}

// dir returns the tree ID of directory n, building new trees for it and its
// dirty descendants.
func (c *committer) dir(n *inode, path string) (chunkstore.ID, error) {
	j := c.j
	if !n.Loaded || (!c.isDirty(n.Ino) && !n.Tree.IsZero()) {
		return n.Tree, nil
	}
	// The previous tree: for the diff, and to reuse the entries of clean
	// children as they are (no record to read for them).
	prev := &chunkstore.Tree{}
	if !n.Tree.IsZero() {
		var err error
		if prev, err = j.store.Tree(c.ctx, n.Tree); err != nil {
			return chunkstore.ID{}, err
		}
	}
	prefix := dentryPrefix(c.epoch, n.Ino)
	it := c.txn.NewIterator(metalog.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
	type dent struct {
		name string
		ino  Ino
	}
	var dents []dent
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		name := string(item.Key()[len(prefix):])
		err := item.Value(func(v []byte) error {
			child, _, ok := parseDentry(v)
			if !ok {
				return fmt.Errorf("%w: bad directory entry %q in %d", ErrIO, name, n.Ino)
			}
			dents = append(dents, dent{name, child})
			return nil
		})
		if err != nil {
			it.Close()
			return chunkstore.ID{}, err
		}
	}
	it.Close()

	tree := &chunkstore.Tree{Entries: make([]chunkstore.Entry, 0, len(dents))}
	pi := 0
	for _, d := range dents {
		for pi < len(prev.Entries) && prev.Entries[pi].Name < d.name {
			pi++
		}
		if pi < len(prev.Entries) && prev.Entries[pi].Name == d.name && Ino(prev.Entries[pi].Ino) == d.ino && !c.isDirty(d.ino) {
			tree.Entries = append(tree.Entries, prev.Entries[pi]) // unchanged
			continue
		}
		cn, err := c.inode(d.ino)
		if err != nil {
			return chunkstore.ID{}, err
		}
		e, err := c.entry(cn, d.name, path)
		if err != nil {
			return chunkstore.ID{}, err
		}
		tree.Entries = append(tree.Entries, e)
	}
	id, err := j.store.PutTree(c.ctx, tree)
	if err != nil {
		return chunkstore.ID{}, err
	}
	c.diff(prev, tree, path)
	if id != n.Tree {
		up := *n
		up.Tree = id
		c.update(&up)
	}
	return id, nil
}

// entry builds the tree entry of child cn named name.
func (c *committer) entry(cn *inode, name, path string) (chunkstore.Entry, error) {
	e := chunkstore.Entry{
		Name: name, Type: cn.Type, Mode: cn.Mode, UID: cn.UID, GID: cn.GID,
		Atime: cn.Atime, Mtime: cn.Mtime, Ctime: cn.Ctime, Size: cn.Size,
		Ino: uint64(cn.Ino), Nlink: cn.Nlink, Rdev: cn.Rdev,
	}
	var err error
	if cn.HasXattrs {
		if e.Xattrs, err = c.xattrs(cn.Ino); err != nil {
			return e, err
		}
	}
	switch cn.Type {
	case TypeDir:
		e.Size = 0
		if e.Subtree, err = c.dir(cn, path+"/"+name); err != nil {
			return e, err
		}
	case TypeSymlink:
		e.Target = cn.Target
	case TypeRegular:
		fc, inline, err := c.fileContent(cn)
		if err != nil {
			return e, fmt.Errorf("%s/%s: %w", path, name, err)
		}
		e.Inline, e.Chunks, e.ChunkLists = inline, fc.Chunks, fc.ChunkLists
	}
	return e, nil
}

// fileContent returns a regular file's content for its tree entry: inline
// bytes for tiny files, chunks otherwise. A dirty staged file is read from
// its staging file and stored (store), unless an operation did that for
// the snapshot already (thaw); any other file keeps its committed content.
func (c *committer) fileContent(n *inode) (chunkstore.FileContent, []byte, error) {
	if !n.Staged || !c.isDirty(n.Ino) {
		return n.content(), n.Inline, nil
	}
	if c.claim(n.Ino) {
		defer c.read(n.Ino)
		c.mu.Lock()
		cf, ok := c.files[n.Ino]
		c.mu.Unlock()
		if ok { // a hardlink seen before, under a locked cut
			return cf.fc, cf.inline, nil
		}
		// Asked again only for another name of it (the walk's own
		// reads are not asked again; an operation's are: thaw).
		return c.store(n, n.Nlink > 1)
	}
	c.mu.Lock()
	cf, ok := c.files[n.Ino]
	err := c.err
	c.mu.Unlock()
	switch {
	case ok:
		return cf.fc, cf.inline, nil
	case err != nil:
		return chunkstore.FileContent{}, nil, err
	}
	return chunkstore.FileContent{}, nil, fmt.Errorf("%w: inode %d was read for the snapshot, but its content is not on record", ErrIO, n.Ino)
}

// store reads dirty staged file n from its staging file and stores it. It
// runs without the journal's lock, on the walk's goroutine or an
// operation's (thaw), once per file. With keep, its content stays on
// record (files) for the walk to ask again.
func (c *committer) store(n *inode, keep bool) (chunkstore.FileContent, []byte, error) {
	j := c.j
	// Its own descriptor: the journal's (stagingFile) are the operations'.
	f, err := j.cfg.FS.OpenFile(j.stagingPath(n.Ino), os.O_RDONLY, 0)
	if err != nil {
		return chunkstore.FileContent{}, nil, j.dataErr("open staging file", n.Ino, err)
	}
	defer f.Close()
	up := *n
	var fc chunkstore.FileContent
	if n.Size <= chunkstore.InlineMax {
		buf := make([]byte, n.Size)
		if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
			return fc, nil, j.dataErr("read staging file", n.Ino, err)
		}
		up.Inline, up.Chunks, up.ChunkLists = nil, nil, nil
		if n.Size > 0 {
			up.Inline = buf
		}
		fc.Size = n.Size
	} else {
		ranges, err := chunkstore.DataRanges(f, n.Size)
		if err != nil {
			return fc, nil, j.dataErr("find the holes of the staging file", n.Ino, err)
		}
		if fc, err = j.store.PutSparseFile(c.ctx, countingReader{f, &j.prog}, n.Size, ranges); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return fc, nil, fmt.Errorf("%w: staging file of inode %d is shorter than its size %d: %v", ErrIO, n.Ino, n.Size, err)
			}
			return fc, nil, err
		}
		up.Inline, up.Chunks, up.ChunkLists = nil, fc.Chunks, fc.ChunkLists
	}
	j.prog.files.Add(1)
	if keep {
		c.mu.Lock()
		c.files[n.Ino] = committedFile{fc: up.content(), inline: up.Inline}
		c.mu.Unlock()
	}
	c.update(&up)
	return up.content(), up.Inline, nil
}

// committedFile is a dirty file's content as this commit stored it.
type committedFile struct {
	fc     chunkstore.FileContent
	inline []byte
}

func (c *committer) xattrs(ino Ino) ([]chunkstore.Xattr, error) {
	return xattrsOf(c.txn, c.epoch, ino)
}

func xattrsOf(txn *metalog.Txn, epoch uint32, ino Ino) ([]chunkstore.Xattr, error) {
	prefix := xattrPrefix(epoch, ino)
	it := txn.NewIterator(metalog.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var out []chunkstore.Xattr
	for it.Rewind(); it.Valid(); it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		if len(v) == 0 {
			v = nil
		}
		out = append(out, chunkstore.Xattr{Name: string(it.Item().Key()[len(prefix):]), Value: v})
	}
	return out, nil
}

// diff records the changes between a directory's previous tree and its new
// one. Directory entries are reported when added or removed, or when their
// own metadata changed; changes inside them are reported by their own diff.
// Paths are relative to the root, without a leading slash, as
// chunkstore.Change says (path is "" at the root, "/a/b" below it).
func (c *committer) diff(prev, cur *chunkstore.Tree, path string) {
	rel := strings.TrimPrefix(path+"/", "/")
	chunkstore.DiffEntries(prev, cur, func(op chunkstore.ChangeOp, before, after *chunkstore.Entry) {
		switch op {
		case chunkstore.ChangeRemoved:
			c.changes = append(c.changes, chunkstore.Change{Path: rel + before.Name, Op: op, Size: before.Size})
		case chunkstore.ChangeAdded, chunkstore.ChangeModified:
			c.changes = append(c.changes, chunkstore.Change{Path: rel + after.Name, Op: op, Size: after.Size})
			c.countChanged(after)
		case chunkstore.ChangeMetadataOnly:
			c.changes = append(c.changes, chunkstore.Change{Path: rel + after.Name, Op: op, Size: after.Size})
		}
	})
}

func (c *committer) countChanged(e *chunkstore.Entry) {
	if e.Type == chunkstore.TypeRegular && !c.counted[e.Ino] {
		c.counted[e.Ino] = true
		c.stats.ChangedFiles++
		c.stats.ChangedBytes += e.Size
	}
}
