package journal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/journal/internal/metalog"

	"github.com/cairnfs/cairn/chunkstore"
)

// Rollback resets the live state to snapshot to, and moves the workspace's
// ref there. The state it discards is snapshotted first; that snapshot's ID
// is returned so the rollback can be undone (by rolling back to it).
//
// Apart from that snapshot (O(changed)), Rollback is O(1): the live state
// moves to a fresh, empty namespace (epoch) whose directories load lazily
// from to's trees; the old namespace and its staging files are deleted in
// the background. The Invalidator is told to drop every kernel cache.
//
// While files are open Rollback refuses (ErrBusy) unless force is set;
// forced, handles opened before it are stale (see Stale).
func (j *Journal) Rollback(ctx context.Context, to chunkstore.ID, force bool) (chunkstore.ID, error) {
	j.snapMu.Lock()
	defer j.snapMu.Unlock()
	var switched bool
	discarded, err := func() (chunkstore.ID, error) {
		if err := j.lockAll(); err != nil {
			return chunkstore.ID{}, err
		}
		defer j.mu.Unlock()
		defer j.useReserve()()
		return j.rollbackLocked(ctx, to, force, &switched)
	}()
	// The kernel's caches are dropped after the lock is released, as by
	// Restore: dropping a file's pages waits for a read in progress, which
	// may wait for the lock.
	if inv := j.cfg.Invalidator; inv != nil && switched {
		inv.InvalidateAll()
	}
	return discarded, err
}

// rollbackLocked is Rollback under the lock; *switched reports whether the
// live state moved to the new epoch (and the kernel's caches must go).
func (j *Journal) rollbackLocked(ctx context.Context, to chunkstore.ID, force bool, switched *bool) (chunkstore.ID, error) {
	if n := len(j.opens); n > 0 && !force {
		return chunkstore.ID{}, fmt.Errorf("%w: %d open files in workspace %q; close them, or force the rollback (their handles then fail with ESTALE or EIO)", ErrBusy, n, j.cfg.Workspace)
	}
	target, err := j.store.Snapshot(ctx, to)
	if err != nil {
		return chunkstore.ID{}, fmt.Errorf("rollback of %q to %s: %w", j.cfg.Workspace, to.Short(), err)
	}
	discarded, rec, err := j.snapshotLocked(ctx, SnapshotOptions{
		Message: fmt.Sprintf("state before rollback to %s", to.Short()),
		Labels:  map[string]string{"cairn.rollback": "discarded"},
	}, true)
	if err != nil {
		return chunkstore.ID{}, fmt.Errorf("rollback of %q: snapshot the current state first: %w", j.cfg.Workspace, err)
	}
	saved := j.m
	// The reset and the intent to move the ref are one transaction: a
	// crash before the ref moved leaves a journal that finishes the move
	// when it opens (resolvePending), not one that looks rebased.
	j.m.Pending, j.m.RollbackPending, j.m.RollbackFrom = to, true, chunkstore.ID{}
	if j.ref != nil {
		j.m.RollbackFrom = j.ref.Snapshot
	}
	// Sequence numbers keep growing across rollbacks.
	if err := j.switchEpoch(to, target, rec.Seq); err != nil {
		j.m = saved
		return discarded, err
	}
	*switched = true
	// A journal that was not on the head (opened without reconciling)
	// takes the head off the history: it is recorded as lost, so that it
	// stays listed with its fork command.
	var offHistory chunkstore.ID
	if j.ref != nil && j.ref.Snapshot != saved.Base && j.ref.Snapshot != to {
		offHistory = j.ref.Snapshot
	}
	ref, err := j.store.SetRef(ctx, j.cfg.Workspace, to, j.ref)
	j.m.Pending, j.m.RollbackPending, j.m.RollbackFrom = chunkstore.ID{}, false, chunkstore.ID{}
	if uerr := j.update(func(*metalog.Txn) error { return nil }); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return discarded, fmt.Errorf("rollback of %q: the live state is at %s, but moving the ref failed: %w", j.cfg.Workspace, to.Short(), err)
	}
	j.ref = &ref
	// A snapshot that was off the history (kept after a divergence, or a
	// lost compare-and-swap) is on it now.
	if err := j.store.ForgetLost(ctx, j.cfg.Workspace, to); err != nil {
		j.cfg.Logf("cairn: %v", err)
	}
	if !offHistory.IsZero() {
		lost := chunkstore.LostSnapshot{Workspace: j.cfg.Workspace, Snapshot: offHistory, Host: j.cfg.Host,
			Reason: fmt.Sprintf("the head until a rollback to %s from a machine whose changes were not on it", to.Short())}
		if err := j.store.RecordLost(ctx, lost); err != nil {
			j.cfg.Logf("cairn: could not record snapshot %s as off the history: %v", offHistory.Short(), err)
		}
	}
	return discarded, nil
}

// dropEpochLater deletes an old epoch's keys and staging files in the
// background, in small batches that never block foreground operations
// (Badger's DropPrefix would block every write until it finished). Close
// waits for it; an interrupted drop is redone at Open.
func (j *Journal) dropEpochLater(epoch uint32) {
	j.bg.Add(1)
	go func() {
		defer j.bg.Done()
		_ = j.deleteEpoch(epoch)
		removeAllSlowly(filepath.Join(j.cfg.Dir, "staging", strconv.FormatUint(uint64(epoch), 10)))
	}()
}

// cleanupPause is how long background cleanup rests between batches, so
// that foreground operations keep the disk and the CPU.
const cleanupPause = 2 * time.Millisecond

// deleteEpoch deletes every key of an epoch in one pass, flushing a write
// batch every thousand keys and resting between batches. (Restarting an
// iterator per batch would walk the growing run of tombstones again.)
func (j *Journal) deleteEpoch(epoch uint32) error {
	return j.db.View(func(txn *metalog.Txn) error {
		it := txn.NewIterator(metalog.IteratorOptions{Prefix: epochPrefix(epoch), PrefetchValues: false})
		defer it.Close()
		wb := j.db.NewWriteBatch()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				wb.Cancel()
				return err
			}
			if n++; n%1000 == 0 {
				if err := wb.Flush(); err != nil {
					return err
				}
				// Deleting frees space, but its tombstones are written
				// first: a full disk stops it (Open redoes it).
				if err := j.space.check(64<<10, true); err != nil {
					return err
				}
				time.Sleep(cleanupPause)
				wb = j.db.NewWriteBatch()
			}
		}
		return wb.Flush()
	})
}

// cleanup removes what a crash may leave behind: keys and staging files of
// old epochs, and staging files whose inode is gone or not staged.
func (j *Journal) cleanup() error {
	var old []uint32
	err := j.db.View(func(txn *metalog.Txn) error {
		it := txn.NewIterator(metalog.IteratorOptions{Prefix: []byte("e")})
		defer it.Close()
		for it.Rewind(); it.Valid(); {
			k := it.Item().Key()
			if len(k) < 5 {
				it.Next()
				continue
			}
			e := uint32(k[1])<<24 | uint32(k[2])<<16 | uint32(k[3])<<8 | uint32(k[4])
			if e == j.m.Epoch {
				break
			}
			old = append(old, e)
			it.Seek(epochPrefix(e + 1))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: scan journal: %v", ErrIO, err)
	}
	for _, e := range old {
		j.dropEpochLater(e)
	}
	dirs, _ := os.ReadDir(filepath.Join(j.cfg.Dir, "staging"))
	for _, d := range dirs {
		if d.Name() != strconv.FormatUint(uint64(j.m.Epoch), 10) {
			os.RemoveAll(filepath.Join(j.cfg.Dir, "staging", d.Name()))
		}
	}
	files, _ := os.ReadDir(j.staging)
	for _, f := range files {
		ino, err := strconv.ParseUint(f.Name(), 10, 64)
		if err != nil {
			os.Remove(filepath.Join(j.staging, f.Name()))
			continue
		}
		n, err := j.inode(Ino(ino))
		if err != nil || !n.Staged {
			os.Remove(filepath.Join(j.staging, f.Name()))
		}
	}
	return nil
}

// removeAllSlowly removes a directory of staging files, resting between
// batches like deleteEpoch.
func removeAllSlowly(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	for {
		names, err := d.Readdirnames(500)
		for _, n := range names {
			os.Remove(filepath.Join(dir, n))
		}
		if err != nil || len(names) == 0 {
			break
		}
		time.Sleep(cleanupPause)
	}
	d.Close()
	os.RemoveAll(dir)
}
