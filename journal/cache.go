package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cairnfs/cairn/journal/internal/metalog"
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

	// noXattrs holds inodes whose committed records say they have no
	// xattrs, for GetXattr without the journal's lock.
	noXattrs xattrFree
}

// xattrFree is a set of inodes of the current epoch known to have no
// xattrs, read without the journal's lock: the kernel asks for
// security.capability twice for each file written (a fifth of the
// requests of tar -x), and GetXattr answers those from here.
//
// It follows the committed records: publish adds an inode whose record it
// publishes without HasXattrs and removes any other, getInode adds one it
// loads without, reset empties it. Every change of an inode's xattrs
// writes its record (HasXattrs set) in the same transaction, and xattrs
// never exist without HasXattrs, so the set never holds an inode with
// xattrs once the transaction that gave it some is published, which is
// before the call that gave them returns: a GetXattr that finds an inode
// here is ordered before that call.
type xattrFree struct {
	mu     sync.RWMutex
	m      map[Ino]struct{}
	closed bool // the journal is closed: nothing is answered from here
}

// xattrFreeMax bounds the set; past it, it starts over (a miss costs only
// the locked path).
const xattrFreeMax = 1 << 16

// has reports whether ino is known to have no xattrs.
func (x *xattrFree) has(ino Ino) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.m[ino]
	return ok && !x.closed
}

// addLocked adds ino; x.mu is held.
func (x *xattrFree) addLocked(ino Ino) {
	if x.m == nil || len(x.m) >= xattrFreeMax {
		x.m = make(map[Ino]struct{})
	}
	x.m[ino] = struct{}{}
}

// note records what n's committed record says.
func (x *xattrFree) note(n *inode) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if n.HasXattrs {
		delete(x.m, n.Ino)
	} else {
		x.addLocked(n.Ino)
	}
}

// publish records the records a transaction committed (nil: deleted).
func (x *xattrFree) publish(recs map[Ino]*inode) {
	if len(recs) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for ino, n := range recs {
		if n != nil && !n.HasXattrs {
			x.addLocked(ino)
		} else {
			delete(x.m, ino)
		}
	}
}

// clear empties the set; with closed, for good.
func (x *xattrFree) clear(closed bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.m = nil
	x.closed = x.closed || closed
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
	c.noXattrs.clear(false)
}

func (j *Journal) getInode(txn *metalog.Txn, ino Ino) (*inode, error) {
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
	j.cache.noXattrs.note(n)
	cp := *n
	return &cp, nil
}

// readInode reads and decodes ino's record of epoch from Badger.
func readInode(txn *metalog.Txn, epoch uint32, ino Ino) (*inode, error) {
	item, err := txn.Get(inodeKey(epoch, ino))
	if errors.Is(err, metalog.ErrKeyNotFound) {
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

func (j *Journal) putInode(txn *metalog.Txn, n *inode) error {
	if err := txn.Set(inodeKey(j.m.Epoch, n.Ino), n.encode()); err != nil {
		return err
	}
	cp := *n
	j.cache.pending[n.Ino] = &cp
	return nil
}

func (j *Journal) delInode(txn *metalog.Txn, ino Ino) error {
	if err := txn.Delete(inodeKey(j.m.Epoch, ino)); err != nil {
		return err
	}
	j.cache.pending[ino] = nil
	return nil
}

// write runs fn in a read-write transaction and publishes the inode records
// it wrote to the cache if it committed.
func (j *Journal) write(fn func(txn *metalog.Txn) error) error {
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
		c.noXattrs.publish(c.pending)
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
	return j.db.View(func(txn *metalog.Txn) error {
		it := txn.NewIterator(metalog.IteratorOptions{Prefix: prefix})
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
