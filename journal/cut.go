package journal

import (
	"errors"
	"fmt"

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
//     that would change or remove them reads that file for the snapshot
//     first (thaw), on its own goroutine, unless the snapshot is reading
//     it already, and then waits for that file. A write waits for one
//     file's ingest, never for the whole snapshot nor for the file the
//     snapshot happens to be reading; removing a staging file is put off
//     to the end of the snapshot.
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
	com      *committer       // reads frozen files for thaw; nil: not yet (thaw waits)
	done     map[Ino]struct{} // frozen files read already
	reading  map[Ino]struct{} // frozen files being read (by the walk or by thaw)
	walked   bool             // every frozen file is read or never will be
	deferred []Ino            // staging files to remove once done
}

// cutLocked cuts (see above). Called with j.mu held; endCut ends it.
func (j *Journal) cutLocked(locked bool) *cutState {
	c := &cutState{
		txn:     j.db.NewTransaction(false),
		frozen:  j.cache.dirty,
		gen:     j.m.Gen,
		epoch:   j.m.Epoch,
		meta:    j.m,
		locked:  locked,
		done:    make(map[Ino]struct{}),
		reading: make(map[Ino]struct{}),
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

// thaw makes sure, with j.mu held, that the running snapshot (if any) has
// read ino's bytes. An operation that changes a file's bytes calls it
// first, before it reads any state: it releases the lock meanwhile. If
// nobody reads the file yet, the operation reads it for the snapshot
// itself (committer.ingest), so that it waits for its own file only,
// not for the big file the snapshot's walk may be reading; otherwise it
// waits until that read is done.
func (j *Journal) thaw(ino Ino) error {
	for j.cut != nil && j.cut.pending(ino) {
		c := j.cut
		if _, busy := c.reading[ino]; !busy && c.com != nil {
			c.reading[ino] = struct{}{}
			j.mu.Unlock()
			c.com.ingest(ino)
			j.mu.Lock()
			c.readDone(ino)
			j.cutCond.Broadcast()
		} else {
			j.cutCond.Wait()
		}
		if j.closed {
			return ErrClosed
		}
	}
	return nil
}

// readDone records, with j.mu held, that ino's frozen bytes are read.
func (c *cutState) readDone(ino Ino) {
	delete(c.reading, ino)
	c.done[ino] = struct{}{}
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

// claim reports whether the walk is to read frozen file ino now: not if
// an operation read it already (thaw), or reads it now, which claim waits
// for. Without a concurrent reader (a locked cut, LiveTree) it always is.
func (c *committer) claim(ino Ino) bool {
	if c.cut == nil || c.cut.locked {
		return true
	}
	j := c.j
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		if _, ok := c.cut.done[ino]; ok {
			return false
		}
		if _, busy := c.cut.reading[ino]; !busy {
			c.cut.reading[ino] = struct{}{}
			return true
		}
		j.cutCond.Wait()
	}
}

// read records that the walk read ino's bytes and wakes who waits.
func (c *committer) read(ino Ino) {
	if c.cut == nil || c.cut.locked {
		return
	}
	c.j.mu.Lock()
	c.cut.readDone(ino)
	c.j.mu.Unlock()
	c.j.cutCond.Broadcast()
}

// walked records that the snapshot read every frozen file it will read:
// it waits for the reads operations are doing (thaw), whose results the
// snapshot uses.
func (c *committer) walked() {
	if c.cut == nil || c.cut.locked {
		return
	}
	c.j.mu.Lock()
	for len(c.cut.reading) > 0 {
		c.j.cutCond.Wait()
	}
	c.cut.walked = true
	c.j.mu.Unlock()
	c.j.cutCond.Broadcast()
}

// ingest reads frozen file ino for the snapshot, for an operation about to
// change it (thaw), without the journal's lock: the record the cut saw,
// the staging file's bytes. A failure fails the snapshot (fail), not the
// operation.
func (c *committer) ingest(ino Ino) {
	n, err := c.inode(ino)
	if errors.Is(err, ErrNotFound) {
		return // not in the cut: nothing to read
	}
	if err == nil && n.Type == TypeRegular {
		_, _, err = c.store(n, true) // the walk asks for it when it gets there
	}
	if err != nil {
		c.fail(fmt.Errorf("inode %d: %w", ino, err))
	}
}
