package metalog

import (
	"bytes"
	"errors"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Txn is a transaction: a snapshot to read and, if it is read-write, the
// writes it will commit as one record. Like a Badger transaction, it is
// not safe for concurrent use, and keys and values passed to Set must not
// change before Commit.
type Txn struct {
	db      *DB
	update  bool
	readSeq uint64
	mems    []*memtable // newest first, as at the start
	btxn    *badger.Txn // nil for a write batch's (write-only) transactions
	writes  []write
	index   map[string]int // key -> its write, once there are many
	size    int64
	done    bool
}

// indexFrom is the number of writes past which a transaction indexes them.
const indexFrom = 16

// NewTransaction starts a transaction; the caller must Discard it.
func (db *DB) NewTransaction(update bool) *Txn {
	db.mu.RLock()
	// The Badger snapshot is taken while no memtable can be dropped: a
	// memtable is dropped only after Badger holds it, so either the
	// snapshot has it or the transaction's memtables do.
	t := &Txn{db: db, update: update, readSeq: db.seq, mems: db.mems, btxn: db.bdb.NewTransaction(false)}
	db.mu.RUnlock()
	return t
}

// View runs fn in a read-only transaction.
func (db *DB) View(fn func(txn *Txn) error) error {
	t := db.NewTransaction(false)
	defer t.Discard()
	return fn(t)
}

// Update runs fn in a read-write transaction and commits it if fn
// succeeds.
func (db *DB) Update(fn func(txn *Txn) error) error {
	t := db.NewTransaction(true)
	defer t.Discard()
	if err := fn(t); err != nil {
		return err
	}
	return t.Commit()
}

// Discard ends the transaction; its writes, if not committed, are dropped.
func (t *Txn) Discard() {
	if t.done {
		return
	}
	t.done = true
	if t.btxn != nil {
		t.btxn.Discard()
	}
}

// Commit appends the transaction's writes to the log as one record. A
// transaction without writes (or a read-only one) commits nothing.
func (t *Txn) Commit() error {
	if t.done {
		return errors.New("commit of a finished transaction")
	}
	defer t.Discard()
	if !t.update {
		return nil // as Badger's: nothing to commit
	}
	if len(t.writes) == 0 {
		return nil
	}
	return t.db.commit(t)
}

// find returns the index of key's write, or -1.
func (t *Txn) find(key []byte) int {
	if t.index != nil {
		if i, ok := t.index[string(key)]; ok {
			return i
		}
		return -1
	}
	for i := len(t.writes) - 1; i >= 0; i-- {
		if bytes.Equal(t.writes[i].key, key) {
			return i
		}
	}
	return -1
}

func (t *Txn) put(w write) error {
	if !t.update {
		return ErrReadOnlyTxn
	}
	if i := t.find(w.key); i >= 0 {
		t.size += int64(len(w.val) - len(t.writes[i].val))
		t.writes[i] = w
		return nil
	}
	size := int64(len(w.key)+len(w.val)) + 12 // Badger counts 12 bytes of metadata
	if int64(len(t.writes))+1 >= t.db.MaxBatchCount() || t.size+size >= t.db.MaxBatchSize() {
		return ErrTxnTooBig
	}
	t.size += size
	t.writes = append(t.writes, w)
	if t.index != nil {
		t.index[string(w.key)] = len(t.writes) - 1
	} else if len(t.writes) > indexFrom {
		t.index = make(map[string]int, 2*len(t.writes))
		for i, w := range t.writes {
			t.index[string(w.key)] = i
		}
	}
	return nil
}

// Set sets key to val.
func (t *Txn) Set(key, val []byte) error {
	if len(key) == 0 {
		return errors.New("empty key")
	}
	return t.put(write{key: key, val: val})
}

// Delete deletes key.
func (t *Txn) Delete(key []byte) error {
	if len(key) == 0 {
		return errors.New("empty key")
	}
	return t.put(write{key: key, del: true})
}

// ownedWrites returns the writes with keys and values copied into one
// allocation, for the memtable to keep.
func (t *Txn) ownedWrites() []write {
	n := 0
	for _, w := range t.writes {
		n += len(w.key) + len(w.val)
	}
	arena := make([]byte, 0, n)
	ws := make([]write, len(t.writes))
	for i, w := range t.writes {
		start := len(arena)
		arena = append(arena, w.key...)
		ws[i].key = arena[start:len(arena):len(arena)]
		start = len(arena)
		arena = append(arena, w.val...)
		ws[i].val = arena[start:len(arena):len(arena)]
		ws[i].del = w.del
	}
	return ws
}

// Get returns key's item, or ErrKeyNotFound.
func (t *Txn) Get(key []byte) (*Item, error) {
	if t.update {
		if i := t.find(key); i >= 0 {
			w := t.writes[i]
			if w.del {
				return nil, ErrKeyNotFound
			}
			return &Item{key: w.key, val: w.val}, nil
		}
	}
	for _, m := range t.mems {
		if e, ok := m.get(key, t.readSeq); ok {
			if e.del {
				return nil, ErrKeyNotFound
			}
			return &Item{key: e.key, val: e.val}, nil
		}
	}
	if t.btxn == nil {
		return nil, ErrKeyNotFound
	}
	bi, err := t.btxn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	return &Item{key: bi.Key(), bi: bi}, nil
}

// Item is a key and its value, valid until the transaction ends (an
// iterator's, until it moves).
type Item struct {
	key []byte
	val []byte
	bi  *badger.Item
}

// Key returns the key; it must not be changed or kept.
func (it *Item) Key() []byte { return it.key }

// KeyCopy returns a copy of the key, in dst if it has room.
func (it *Item) KeyCopy(dst []byte) []byte { return append(dst[:0], it.key...) }

// Value calls fn with the value, which fn must not change or keep.
func (it *Item) Value(fn func(val []byte) error) error {
	if it.bi != nil {
		return it.bi.Value(fn)
	}
	return fn(it.val)
}

// ValueCopy returns a copy of the value, in dst if it has room.
func (it *Item) ValueCopy(dst []byte) ([]byte, error) {
	if it.bi != nil {
		return it.bi.ValueCopy(dst)
	}
	return append(dst[:0], it.val...), nil
}

// IteratorOptions choose what an iterator walks.
type IteratorOptions struct {
	// Prefix limits the iterator to keys with it.
	Prefix []byte
	// PrefetchValues and PrefetchSize are passed to Badger's iterator.
	PrefetchValues bool
	PrefetchSize   int
}

// Iterator walks a transaction's keys in order: its own writes, the
// memtables and Badger merged, the newest version of each key winning and
// deleted keys skipped.
type Iterator struct {
	t      *Txn
	prefix []byte
	pend   []write // the transaction's writes, sorted by key
	pi     int
	heads  []head // one per memtable, newest first
	bit    *badger.Iterator
	item   Item
	valid  bool
}

// head is an iterator's position in one memtable.
type head struct {
	e  entry
	ok bool
}

// NewIterator returns an iterator; the caller must Close it before the
// transaction ends.
func (t *Txn) NewIterator(opts IteratorOptions) *Iterator {
	it := &Iterator{t: t, prefix: opts.Prefix, heads: make([]head, len(t.mems))}
	if t.update && len(t.writes) > 0 {
		for _, w := range t.writes {
			if bytes.HasPrefix(w.key, opts.Prefix) {
				it.pend = append(it.pend, w)
			}
		}
		slices.SortFunc(it.pend, func(a, b write) int { return bytes.Compare(a.key, b.key) })
	}
	if t.btxn != nil {
		bo := badger.DefaultIteratorOptions
		bo.Prefix, bo.PrefetchValues = opts.Prefix, opts.PrefetchValues
		if opts.PrefetchSize > 0 {
			bo.PrefetchSize = opts.PrefetchSize
		}
		it.bit = t.btxn.NewIterator(bo)
	}
	return it
}

// Close releases the iterator.
func (it *Iterator) Close() {
	if it.bit != nil {
		it.bit.Close()
		it.bit = nil
	}
}

// Rewind moves to the first key (with the prefix).
func (it *Iterator) Rewind() { it.Seek(it.prefix) }

// Seek moves to the first key at or after key.
func (it *Iterator) Seek(key []byte) {
	if bytes.Compare(key, it.prefix) < 0 {
		key = it.prefix
	}
	it.pi, _ = slices.BinarySearchFunc(it.pend, key, func(w write, k []byte) int { return bytes.Compare(w.key, k) })
	for i, m := range it.t.mems {
		it.heads[i].e, it.heads[i].ok = m.next(key, false, it.t.readSeq)
	}
	if it.bit != nil {
		it.bit.Seek(key)
	}
	it.settle()
}

func (it *Iterator) badgerKey() ([]byte, bool) {
	if it.bit == nil || !it.bit.ValidForPrefix(it.prefix) {
		return nil, false
	}
	return it.bit.Item().Key(), true
}

// settle makes the smallest key of all sources current, skipping deleted
// keys: of the sources at that key, the newest wins and the others move on.
func (it *Iterator) settle() {
	for {
		var min []byte
		have := false
		if it.pi < len(it.pend) {
			min, have = it.pend[it.pi].key, true
		}
		for _, h := range it.heads {
			if h.ok && (!have || bytes.Compare(h.e.key, min) < 0) {
				min, have = h.e.key, true
			}
		}
		bk, bok := it.badgerKey()
		if bok && (!have || bytes.Compare(bk, min) < 0) {
			min, have = bk, true
		}
		if !have || !bytes.HasPrefix(min, it.prefix) {
			it.valid = false
			return
		}
		// The winner: the transaction's write, else the newest memtable,
		// else Badger.
		var del bool
		switch {
		case it.pi < len(it.pend) && bytes.Equal(it.pend[it.pi].key, min):
			w := it.pend[it.pi]
			it.item, del = Item{key: w.key, val: w.val}, w.del
		default:
			found := false
			for _, h := range it.heads {
				if h.ok && bytes.Equal(h.e.key, min) {
					it.item, del, found = Item{key: h.e.key, val: h.e.val}, h.e.del, true
					break
				}
			}
			if !found {
				bi := it.bit.Item()
				it.item, del = Item{key: bi.Key(), bi: bi}, false
			}
		}
		if !del {
			it.valid = true
			return
		}
		it.advance(min)
	}
}

// advance moves every source at key past it (Badger last: key may be its).
func (it *Iterator) advance(key []byte) {
	if it.pi < len(it.pend) && bytes.Equal(it.pend[it.pi].key, key) {
		it.pi++
	}
	for i, h := range it.heads {
		if h.ok && bytes.Equal(h.e.key, key) {
			it.heads[i].e, it.heads[i].ok = it.t.mems[i].next(key, true, it.t.readSeq)
		}
	}
	if bk, ok := it.badgerKey(); ok && bytes.Equal(bk, key) {
		it.bit.Next()
	}
}

// Valid reports whether the iterator is at a key.
func (it *Iterator) Valid() bool { return it.valid }

// ValidForPrefix reports whether the iterator is at a key with prefix.
func (it *Iterator) ValidForPrefix(prefix []byte) bool {
	return it.valid && bytes.HasPrefix(it.item.key, prefix)
}

// Item returns the current item, valid until the iterator moves.
func (it *Iterator) Item() *Item { return &it.item }

// Next moves to the next key.
func (it *Iterator) Next() {
	if !it.valid {
		return
	}
	it.advance(it.item.key)
	it.settle()
}

// WriteBatch commits many writes in as many transactions as the limits
// need. Not atomic as a whole; each of its transactions is.
type WriteBatch struct {
	db  *DB
	txn *Txn
	err error
}

// NewWriteBatch starts a write batch.
func (db *DB) NewWriteBatch() *WriteBatch {
	return &WriteBatch{db: db, txn: &Txn{db: db, update: true}}
}

func (wb *WriteBatch) put(w write) error {
	if wb.err != nil {
		return wb.err
	}
	err := wb.txn.put(w)
	if errors.Is(err, ErrTxnTooBig) {
		if err = wb.txn.Commit(); err == nil {
			wb.txn = &Txn{db: wb.db, update: true}
			err = wb.txn.put(w)
		}
	}
	wb.err = err
	return err
}

// Set sets key to val.
func (wb *WriteBatch) Set(key, val []byte) error { return wb.put(write{key: key, val: val}) }

// Delete deletes key.
func (wb *WriteBatch) Delete(key []byte) error { return wb.put(write{key: key, del: true}) }

// Flush commits what the batch holds.
func (wb *WriteBatch) Flush() error {
	if wb.err != nil {
		return wb.err
	}
	return wb.txn.Commit()
}

// Cancel drops what the batch holds.
func (wb *WriteBatch) Cancel() { wb.txn.Discard() }
