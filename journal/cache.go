package journal

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// inodeCache keeps decoded inode records of the current epoch in memory, so
// that hot inodes (the directories every operation touches) are not read
// and decoded from Badger each time. It holds committed state only: records
// written in a transaction wait in pending and are published when it
// commits, dropped when it fails. Operations are serialised by j.mu, so one
// pending set suffices. Callers get copies and may modify them (slices are
// shared and never modified in place).
type inodeCache struct {
	m       map[Ino]*inode
	pending map[Ino]*inode // written in the current transaction; nil: deleted

	// marked holds the directories whose dirty marker carries the current
	// generation (so their ancestors' do too); valid for one generation.
	marked        map[Ino]struct{}
	pendingMarked []Ino

	// dirty is the dirty set: every inode whose marker is newer than the
	// last commit. Loaded at open (O(dirty)), kept in step by setDirty,
	// emptied by a commit.
	dirty        map[Ino]struct{}
	pendingDirty []Ino
}

// inodeCacheMax bounds the cache; past it, it starts over.
const inodeCacheMax = 8192

func newInodeCache() inodeCache {
	return inodeCache{m: make(map[Ino]*inode), pending: make(map[Ino]*inode), marked: make(map[Ino]struct{}), dirty: make(map[Ino]struct{})}
}

func (c *inodeCache) reset() {
	clear(c.m)
	clear(c.pending)
	clear(c.marked)
	c.pendingMarked = c.pendingMarked[:0]
	clear(c.dirty)
	c.pendingDirty = c.pendingDirty[:0]
}

func (j *Journal) getInode(txn *badger.Txn, ino Ino) (*inode, error) {
	if n, ok := j.cache.pending[ino]; ok {
		if n == nil {
			return nil, fmt.Errorf("inode %d: %w", ino, ErrNotFound)
		}
		cp := *n
		return &cp, nil
	}
	if n, ok := j.cache.m[ino]; ok {
		cp := *n
		return &cp, nil
	}
	n, err := readInode(txn, j.m.Epoch, ino)
	if err != nil {
		return nil, err
	}
	if len(j.cache.m) >= inodeCacheMax {
		clear(j.cache.m)
	}
	j.cache.m[ino] = n
	cp := *n
	return &cp, nil
}

// readInode reads and decodes ino's record of epoch from Badger.
func readInode(txn *badger.Txn, epoch uint32, ino Ino) (*inode, error) {
	item, err := txn.Get(inodeKey(epoch, ino))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("inode %d: %w", ino, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var n *inode
	err = item.Value(func(v []byte) error {
		n, err = decodeInode(ino, v)
		return err
	})
	return n, err
}

func (j *Journal) putInode(txn *badger.Txn, n *inode) error {
	if err := txn.Set(inodeKey(j.m.Epoch, n.Ino), n.encode()); err != nil {
		return err
	}
	cp := *n
	j.cache.pending[n.Ino] = &cp
	return nil
}

func (j *Journal) delInode(txn *badger.Txn, ino Ino) error {
	if err := txn.Delete(inodeKey(j.m.Epoch, ino)); err != nil {
		return err
	}
	j.cache.pending[ino] = nil
	return nil
}

// write runs fn in a read-write transaction and publishes the inode records
// it wrote to the cache if it committed.
func (j *Journal) write(fn func(txn *badger.Txn) error) error {
	if err := j.space.check(txnEstimate, j.reserved > 0); err != nil {
		return err
	}
	j.cache.begin()
	err := j.db.Update(fn)
	j.cache.end(err == nil)
	return err
}

// begin starts collecting what a transaction writes.
func (c *inodeCache) begin() {
	clear(c.pending)
	c.pendingMarked = c.pendingMarked[:0]
	c.pendingDirty = c.pendingDirty[:0]
}

// end publishes what the transaction wrote if it committed, and drops it.
func (c *inodeCache) end(committed bool) { c.publish(committed, false) }

// endBulk is end for one of the transactions of a writeSplit that took
// several (a big directory load): its records are published only as far
// as the cache's bound, so that loading a directory of 100,000 small files
// does not keep them all, inline content included, in memory.
func (c *inodeCache) endBulk(committed bool) { c.publish(committed, true) }

func (c *inodeCache) publish(committed, bounded bool) {
	if committed {
		// Past its bound the cache starts over, as getInode's does: an
		// operation's own records (a handful) always go in, a bulk load's
		// only as far as the bound. (Unbounded, 100k creates kept 100k
		// records: 19 MB of the daemon's heap.)
		if len(c.m)+len(c.pending) > inodeCacheMax {
			clear(c.m)
		}
		for ino, n := range c.pending {
			if n != nil && (!bounded || len(c.m) < inodeCacheMax) {
				c.m[ino] = n
			} else {
				delete(c.m, ino) // deleted, or no room: never leave an older record
			}
		}
		for _, ino := range c.pendingMarked {
			c.marked[ino] = struct{}{}
		}
		for _, ino := range c.pendingDirty {
			c.dirty[ino] = struct{}{}
		}
	}
	c.begin()
}

// loadDirty fills the in-memory dirty set from the markers (at open).
func (j *Journal) loadDirty() error {
	clear(j.cache.dirty)
	prefix := inoKey(j.m.Epoch, 'D', 0)[:6]
	return j.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != 14 {
				continue
			}
			err := it.Item().Value(func(v []byte) error {
				if len(v) == 8 && binary.BigEndian.Uint64(v) > j.m.Committed {
					j.cache.dirty[Ino(binary.BigEndian.Uint64(k[6:]))] = struct{}{}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}
