package journal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/cairnfs/cairn/journal/internal/metalog"

	"github.com/cairnfs/cairn/chunkstore"
)

// Reconciling a journal with the store's head (DESIGN.md, durability
// contract 7). A workspace is one line of history shared by every machine
// that opens it; a journal is one machine's live state of it, derived
// from its base snapshot. When the journal opens, or is about to move the
// ref, the store's head may be another snapshot than its base: another
// machine took turns meanwhile (or a rollback moved the head). Then:
//
//   - the journal has no changes since its base: it rebases onto the head,
//     O(1) (a fresh epoch whose directories load lazily from the head);
//   - it has changes: they are kept as a snapshot of their own (parent:
//     the base; no ref points at it), recorded as lost on the workspace
//     (chunkstore.Store.RecordLost), and the open or the snapshot fails
//     with a *DivergedError that names both snapshots and the commands
//     that fork or adopt either. Nothing merges silently; nothing is
//     dropped.

// DivergedError reports that a workspace's head moved away from the
// snapshot a journal's changes derive from. It matches
// chunkstore.ErrConflict.
type DivergedError struct {
	Workspace string
	// Local keeps the journal's changes: a snapshot whose parent is Base,
	// not on the workspace's history.
	Local chunkstore.ID
	// Base is the snapshot the journal derived from.
	Base chunkstore.ID
	// Head is the workspace's head in the store.
	Head chunkstore.ID
}

func (e *DivergedError) Error() string {
	base := "an empty workspace"
	if !e.Base.IsZero() {
		base = "snapshot " + e.Base.Short()
	}
	return fmt.Sprintf("workspace %q moved on in the store (head %s) while this machine had changes on top of %s that are not in it; they are kept as snapshot %s. "+
		"Keep them as a new workspace: cairn fork %s NAME; make them the head (%s is then listed as lost): cairn rollback %s %s; or continue from the head here (they stay in %s): cairn rollback %s %s",
		e.Workspace, e.Head.Short(), base, e.Local.Short(),
		e.Local.Short(), e.Head.Short(), e.Workspace, e.Local.Short(), e.Local.Short(), e.Workspace, e.Head.Short())
}

func (e *DivergedError) Unwrap() error { return chunkstore.ErrConflict }

// DivergedLabel labels a snapshot that keeps a journal's changes after its
// workspace's head moved elsewhere; its value is that head's ID.
const DivergedLabel = "cairn.diverged"

// reconcile brings a journal that was just opened up to the store's head
// (see the top of this file). j.ref is the ref as read at Open.
func (j *Journal) reconcile(ctx context.Context) error {
	if j.cfg.NoReconcile || j.ref == nil || j.ref.Snapshot == j.m.Base {
		// Same head; or no head yet (a new workspace, a fork not yet
		// snapshotted): the first snapshot creates the ref, by
		// compare-and-swap against its absence.
		return nil
	}
	head := j.ref.Snapshot
	if len(j.cache.dirty) == 0 {
		return j.rebase(ctx, head)
	}
	host := j.cfg.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	cut := j.cutLocked(true)
	snap, _, err := j.buildSnapshot(ctx, SnapshotOptions{
		Message: fmt.Sprintf("changes on %s not in the workspace's history: its head moved to %s", host, head.Short()),
	}, cut)
	j.endCut(cut, false) // the changes stay dirty
	if err != nil {
		return fmt.Errorf("keep the changes of %q on this machine: %w", j.cfg.Workspace, err)
	}
	if !j.m.Base.IsZero() {
		// Markers can outlive what they mark (a file changed and changed
		// back; a crash after a snapshot, before its markers went): with
		// the same trees as the base, there is nothing to keep.
		if base, err := j.store.Snapshot(ctx, j.m.Base); err == nil && sameState(base, snap) {
			return j.rebase(ctx, head)
		}
	}
	return j.keepDiverged(ctx, snap, head)
}

// keepDiverged stores snap (the journal's state, not stored yet) as the
// snapshot that keeps this journal's changes after the head moved to
// head, or finds it stored already by an earlier attempt, records it, and
// returns the *DivergedError to report.
func (j *Journal) keepDiverged(ctx context.Context, snap *chunkstore.Snapshot, head chunkstore.ID) error {
	if !j.m.Diverged.IsZero() {
		if prev, err := j.store.Snapshot(ctx, j.m.Diverged); err == nil && sameState(prev, snap) && slices.Equal(prev.Parents, snap.Parents) {
			return j.recordDiverged(ctx, j.m.Diverged, head)
		}
	}
	labels := maps.Clone(snap.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[DivergedLabel] = head.String()
	snap.Labels = labels
	id, err := j.store.PutSnapshot(ctx, snap)
	if err != nil {
		return fmt.Errorf("keep the changes of %q on this machine: %w", j.cfg.Workspace, err)
	}
	return j.recordDiverged(ctx, id, head)
}

// recordDiverged records that snapshot local (stored) keeps this journal's
// changes, off the workspace's history whose head is head: in the journal
// (so that the next attempt names the same snapshot), in the store (so
// that every machine can list it: `cairn workspaces`) and in the log. It
// returns the *DivergedError to report.
func (j *Journal) recordDiverged(ctx context.Context, local, head chunkstore.ID) error {
	derr := &DivergedError{Workspace: j.cfg.Workspace, Local: local, Base: j.m.Base, Head: head}
	if j.m.Diverged != local || j.m.DivergedHead != head {
		j.m.Diverged, j.m.DivergedHead = local, head
		if err := j.update(func(*metalog.Txn) error { return nil }); err != nil {
			return errors.Join(derr, err)
		}
		lost := chunkstore.LostSnapshot{Workspace: j.cfg.Workspace, Snapshot: local, Parent: j.m.Base, Head: head, Host: j.cfg.Host,
			Reason: "the workspace's head moved while this machine had changes not in it"}
		if err := j.store.RecordLost(ctx, lost); err != nil {
			j.cfg.Logf("cairn: could not record lost snapshot %s in the store (%v); it is in the store, fork it to keep it", local.Short(), err)
		}
	}
	j.cfg.Logf("cairn: %v", derr)
	return derr
}

// Diverged returns the snapshot that keeps this journal's changes after
// its workspace's head moved elsewhere, and that head (zero: none).
func (j *Journal) Diverged() (local, head chunkstore.ID) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.m.Diverged, j.m.DivergedHead
}

// sameState reports whether two snapshot records hold the same tree.
func sameState(a, b *chunkstore.Snapshot) bool {
	x, y := a.RootAttr, b.RootAttr
	return a.Root == b.Root && x.Mode == y.Mode && x.UID == y.UID && x.GID == y.GID &&
		x.Mtime == y.Mtime && x.Ctime == y.Ctime && slices.EqualFunc(x.Xattrs, y.Xattrs, func(p, q chunkstore.Xattr) bool {
		return p.Name == q.Name && string(p.Value) == string(q.Value)
	})
}

// rebase moves a journal without changes onto snapshot head: O(1), like a
// rollback without its snapshot of the discarded state and its ref move.
func (j *Journal) rebase(ctx context.Context, head chunkstore.ID) error {
	target, err := j.store.Snapshot(ctx, head)
	if err != nil {
		return fmt.Errorf("rebase %q onto its head %s: %w", j.cfg.Workspace, head.Short(), err)
	}
	from := j.m.Base
	if err := j.switchEpoch(head, target, target.Seq); err != nil {
		return fmt.Errorf("rebase %q onto its head %s: %w", j.cfg.Workspace, head.Short(), err)
	}
	j.cfg.Logf("cairn: workspace %q moved on in the store; this machine had no changes since %s and continues from the head %s", j.cfg.Workspace, from.Short(), head.Short())
	return nil
}

// switchEpoch resets the live state to snapshot to (its record target):
// a fresh epoch whose directories load lazily from to's trees, with
// sequence number seq, and a new Generation; the old epoch is dropped in
// the background. Handles opened before are stale. The caller drops the
// kernel's caches once it released the lock (see Rollback). On an error
// the journal is as before.
func (j *Journal) switchEpoch(to chunkstore.ID, target *chunkstore.Snapshot, seq uint64) error {
	saved := j.m
	oldEpoch := j.m.Epoch
	j.m.Epoch++
	j.cache.reset()
	root, xattrs, err := j.rootOf(to, target)
	if err != nil {
		j.m = saved
		j.cache.reset()
		return err
	}
	j.m.Seq = seq
	j.m.Diverged, j.m.DivergedHead = chunkstore.ID{}, chunkstore.ID{}
	j.generation.Add(1)
	err = j.update(func(txn *metalog.Txn) error {
		if err := j.putInode(txn, root); err != nil {
			return err
		}
		for _, x := range xattrs {
			if err := txn.Set(xattrKey(j.m.Epoch, RootIno, x.Name), x.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		j.m = saved
		j.cache.reset()
		return err
	}
	for ino, f := range j.files {
		f.Close()
		delete(j.files, ino)
	}
	j.loadedDirs = make(map[Ino]struct{})
	clear(j.trimmed)
	clear(j.opens) // open handles belong to the old epoch (Release ignores them)
	clear(j.writers)
	j.staging = filepath.Join(j.cfg.Dir, "staging", strconv.FormatUint(uint64(j.m.Epoch), 10))
	if err := os.MkdirAll(j.staging, 0o700); err != nil {
		return j.dataErr("create staging directory", RootIno, err)
	}
	j.dropEpochLater(oldEpoch)
	return nil
}
