package journal

import (
	"sync/atomic"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

// The cut. A snapshot does not hold the journal's lock while it reads,
// chunks, compresses and packs the changed files: the mount keeps serving.
// Under the lock, in O(1) work bar the writers' sizes (lockAll), it cuts:
//
//   - a Badger read transaction taken now is the namespace and the records
//     of the snapshot (Badger keeps the versions it sees, whatever commits
//     later);
//   - the dirty set is frozen (cutState.frozen) and a new one starts, with
//     a new marker generation: what changes after the cut is dirty for the
//     next snapshot, whether or not it was dirty before;
//   - the bytes of frozen files are the staging files' bytes: an operation
//     that would change or remove them waits at its start (thaw) until
//     the snapshot has read that file, which it then reads first (urgent).
//     A write waits for one file's ingest, never for the whole snapshot;
//     removing a staging file is put off to the end of the snapshot.
//
// Then the snapshot reads and stores without the lock, and takes the lock
// again to record the snapshot (store record, ref, journal records). Its
// records update only what the cut saw: a record changed after the cut
// keeps its change and stays dirty. Files open for passthrough writing are
// written by the kernel at any time, before the cut as after: they stay
// dirty after every snapshot (handle.go).
//
// Snapshots are serialised (snapMu), and so are the operations that
// replace the live state or end the journal (rollback, restore, diff's
// LiveTree, Close): they take snapMu first.

// afterCut, if set (by tests), is called by Snapshot right after the cut,
// without the lock.
var afterCut func()

// cutState is the state of a running snapshot's cut.
type cutState struct {
	txn    *metalog.Txn     // the namespace at the cut
	frozen map[Ino]struct{} // the dirty set at the cut
	gen    uint64           // the marker generation at the cut: Committed once done
	epoch  uint32
	meta   meta // the journal's meta at the cut
	locked bool // the snapshot holds the journal's lock throughout

	// Under the journal's lock:
	done     map[Ino]struct{} // frozen files read already
	walked   bool             // every frozen file is read or never will be
	urgent   []Ino            // frozen files an operation waits for
	deferred []Ino            // staging files to remove once done
	asked    atomic.Int32     // len(urgent) > 0, read without the lock
}

// cutLocked cuts (see above). Called with j.mu held; endCut ends it.
func (j *Journal) cutLocked(locked bool) *cutState {
	c := &cutState{
		txn:    j.db.NewTransaction(false),
		frozen: j.cache.dirty,
		gen:    j.m.Gen,
		epoch:  j.m.Epoch,
		meta:   j.m,
		locked: locked,
		done:   make(map[Ino]struct{}),
	}
	j.cache.dirty = make(map[Ino]struct{})
	clear(j.cache.marked) // valid for one generation
	j.m.Gen++             // saved with the next update; markers of the cut's generation stay dirty until Committed moves
	j.cut = c
	return c
}

// endCut ends the cut, with j.mu held. If the snapshot did not commit, the
// frozen set is dirty again.
func (j *Journal) endCut(c *cutState, committed bool) {
	if !committed {
		for ino := range c.frozen {
			j.cache.dirty[ino] = struct{}{}
		}
	}
	c.txn.Discard()
	j.cut = nil
	for _, ino := range c.deferred {
		j.cfg.FS.Remove(j.stagingPath(ino))
	}
	j.cutCond.Broadcast()
}

// pending reports whether the bytes of ino are frozen and not read yet.
func (c *cutState) pending(ino Ino) bool {
	if c.walked {
		return false
	}
	if _, ok := c.frozen[ino]; !ok {
		return false
	}
	_, done := c.done[ino]
	return !done
}

// thaw waits, with j.mu held, until the running snapshot (if any) has read
// ino's bytes. An operation that changes a file's bytes calls it first,
// before it reads any state: the wait releases the lock.
func (j *Journal) thaw(ino Ino) error {
	for j.cut != nil && j.cut.pending(ino) {
		j.cut.urgent = append(j.cut.urgent, ino)
		j.cut.asked.Store(1)
		j.cutCond.Wait()
		if j.closed {
			return ErrClosed
		}
	}
	return nil
}

// removeStaging removes ino's staging file now, or when the running
// snapshot ends if it may still read it.
func (j *Journal) removeStaging(ino Ino) {
	if c := j.cut; c != nil {
		if _, ok := c.frozen[ino]; ok {
			c.deferred = append(c.deferred, ino)
			return
		}
	}
	j.cfg.FS.Remove(j.stagingPath(ino))
}

// read records that the snapshot read ino's bytes and wakes who waits.
func (c *committer) read(ino Ino) {
	if c.cut == nil || c.cut.locked {
		return
	}
	c.j.mu.Lock()
	c.cut.done[ino] = struct{}{}
	c.j.mu.Unlock()
	c.j.cutCond.Broadcast()
}

// walked records that the snapshot read every frozen file it will read.
func (c *committer) walked() {
	if c.cut == nil || c.cut.locked {
		return
	}
	c.j.mu.Lock()
	c.cut.walked = true
	c.j.mu.Unlock()
	c.j.cutCond.Broadcast()
}

// serveUrgent reads the frozen files operations wait for, out of the
// walk's order (fileContent keeps them for when the walk comes by).
func (c *committer) serveUrgent() error {
	if c.cut == nil || c.cut.locked || c.cut.asked.Load() == 0 {
		return nil
	}
	c.j.mu.Lock()
	urgent := c.cut.urgent
	c.cut.urgent = nil
	c.cut.asked.Store(0)
	c.j.mu.Unlock()
	for _, ino := range urgent {
		n, err := c.inode(ino)
		if err == nil && n.Type == TypeRegular {
			if _, _, err := c.fileContent(n); err != nil {
				return err
			}
		}
		c.read(ino) // deleted or not a file: nothing to wait for
	}
	return nil
}
