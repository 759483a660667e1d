package metalog

import (
	"bytes"
	"math"
	"sync"

	"github.com/google/btree"
)

// entry is one version of a key in a memtable: a value, or a deletion.
type entry struct {
	key []byte
	val []byte
	seq uint64
	del bool
}

// entryOverhead is what the memtable counts per entry beyond its key and
// value (the tree's item and node share).
const entryOverhead = 64

// lessEntry orders by key, then newest version first, so that the first
// entry at or after (key, seq) is the version a reader at seq sees.
func lessEntry(a, b entry) bool {
	if c := bytes.Compare(a.key, b.key); c != 0 {
		return c < 0
	}
	return a.seq > b.seq
}

// memtable holds the records of one log segment as versioned entries. The
// active memtable takes every commit; a frozen one only waits for the
// checkpointer. Its lock lets readers run while a commit adds entries.
type memtable struct {
	mu    sync.RWMutex
	tree  *btree.BTreeG[entry]
	bytes int64  // keys, values and entryOverhead of every entry
	last  uint64 // sequence number of the newest record applied
	seg   *segment
}

func newMemtable(seg *segment) *memtable {
	return &memtable{tree: btree.NewG(32, lessEntry), seg: seg}
}

// apply adds a record's writes, whose keys and values it keeps.
func (m *memtable) apply(seq uint64, ws []write) {
	m.mu.Lock()
	for _, w := range ws {
		m.tree.ReplaceOrInsert(entry{key: w.key, val: w.val, seq: seq, del: w.del})
		m.bytes += int64(len(w.key)+len(w.val)) + entryOverhead
	}
	m.last = seq
	m.mu.Unlock()
}

// get returns the newest version of key at or before seq.
func (m *memtable) get(key []byte, seq uint64) (entry, bool) {
	var out entry
	found := false
	m.mu.RLock()
	m.tree.AscendGreaterOrEqual(entry{key: key, seq: seq}, func(e entry) bool {
		if bytes.Equal(e.key, key) {
			out, found = e, true
		}
		return false
	})
	m.mu.RUnlock()
	return out, found
}

// next returns the newest version at or before seq of the first key at or
// after from (after it, if strict).
func (m *memtable) next(from []byte, strict bool, seq uint64) (entry, bool) {
	var out entry
	found := false
	m.mu.RLock()
	m.tree.AscendGreaterOrEqual(entry{key: from, seq: math.MaxUint64}, func(e entry) bool {
		if e.seq > seq || (strict && bytes.Equal(e.key, from)) {
			return true
		}
		out, found = e, true
		return false
	})
	m.mu.RUnlock()
	return out, found
}

// newest calls fn with the newest version of every key, in key order
// (the checkpointer's view of a frozen memtable).
func (m *memtable) newest(fn func(e entry) error) error {
	var err error
	var prev []byte
	first := true
	m.mu.RLock()
	m.tree.Ascend(func(e entry) bool {
		if !first && bytes.Equal(e.key, prev) {
			return true
		}
		first, prev = false, e.key
		err = fn(e)
		return err == nil
	})
	m.mu.RUnlock()
	return err
}
