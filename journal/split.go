package journal

import (
	"errors"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

// Badger refuses a transaction past its limits (metalog.ErrTxnTooBig): with
// badgerOptions, about 2.4 MB of keys and values (15% of the memtable) or
// 25,000 keys. Inline file content (up to chunkstore.InlineMax) lives in
// the inode records, so a few hundred small files already fill one. Work of
// unbounded size is therefore split:
//
//   - writeSplit runs a sequence of writes in as many transactions as the
//     limits need. Only for writes of which every prefix is a consistent
//     state: idempotent ones (a directory load, redone whole if cut short)
//     or ones that a marker written before or after them makes safe (the
//     records a snapshot updates after its ref moved, see resolvePending).
//   - sizedBatches splits items whose writes must stay together (an entry
//     restored with the meta counters that count it) into transactions by
//     their estimated size.

// splitCommitted, if set (by tests, for fault injection), is called after
// each transaction writeSplit commits before its last; an error stops the
// writes there, as a crash between two transactions would.
var splitCommitted func(commits int) error

// splitWriter is the transaction of a writeSplit that is being filled.
type splitWriter struct {
	j       *Journal
	txn     *metalog.Txn
	commits int // transactions committed so far
}

// splitEstimate is the bytes the full-disk guard counts for one
// transaction of writeSplit: Badger's limit with the journal's options.
const splitEstimate = 4 << 20

// writeSplit runs fn, whose writes go through w, committing a transaction
// and starting the next whenever the current one is full. The inode records
// of each committed transaction are published to the cache as it commits.
// If fn or a commit fails, what was committed before stays.
func (j *Journal) writeSplit(fn func(w *splitWriter) error) error {
	// The full-disk guard, as for j.write: each transaction is counted as
	// one at Badger's size limit (next checks again).
	if err := j.space.check(splitEstimate, j.reserved > 0); err != nil {
		return err
	}
	w := &splitWriter{j: j, txn: j.db.NewTransaction(true)}
	j.cache.begin()
	err := fn(w)
	if err == nil {
		err = w.txn.Commit()
	}
	w.txn.Discard()
	if w.commits > 0 {
		j.cache.endBulk(err == nil)
	} else {
		j.cache.end(err == nil) // one transaction: as j.write does
	}
	return err
}

// set sets key to value, in the next transaction if the current one is full.
func (w *splitWriter) set(key, value []byte) error {
	err := w.txn.Set(key, value)
	if !errors.Is(err, metalog.ErrTxnTooBig) {
		return err
	}
	// Badger checks the size before it adds the entry: the full
	// transaction holds everything before this one.
	if err := w.next(); err != nil {
		return err
	}
	return w.txn.Set(key, value)
}

// delete deletes key, in the next transaction if the current one is full.
func (w *splitWriter) delete(key []byte) error {
	err := w.txn.Delete(key)
	if !errors.Is(err, metalog.ErrTxnTooBig) {
		return err
	}
	if err := w.next(); err != nil {
		return err
	}
	return w.txn.Delete(key)
}

// next commits the current transaction and starts the next. Callers also
// use it to bound a transaction by their own measure (entries).
func (w *splitWriter) next() error {
	err := w.txn.Commit()
	w.j.cache.endBulk(err == nil)
	if err != nil {
		return err
	}
	w.commits++
	if err := w.j.space.check(splitEstimate, w.j.reserved > 0); err != nil {
		w.txn = w.j.db.NewTransaction(true) // discarded by writeSplit
		return err
	}
	if splitCommitted != nil {
		if err := splitCommitted(w.commits); err != nil {
			return err
		}
	}
	w.txn = w.j.db.NewTransaction(true)
	return nil
}

// putInode writes an inode record, like Journal.putInode.
func (w *splitWriter) putInode(n *inode) error {
	if err := w.set(inodeKey(w.j.m.Epoch, n.Ino), n.encode()); err != nil {
		return err
	}
	cp := *n
	w.j.cache.pending[n.Ino] = &cp
	return nil
}

// txnBudget is what one transaction of sizedBatches may hold: half of
// Badger's limits, so that an estimate a little short never fails.
func (j *Journal) txnBudget() (bytes, keys int64) {
	return j.db.MaxBatchSize() / 2, j.db.MaxBatchCount() / 2
}

// sizedBatches calls fn for consecutive ranges [start, end) of n items, at
// most max items and the transaction budget long, by the estimated size
// of each item's writes (size returns its bytes of keys and values, and
// its number of keys). An item over the budget gets a range of its own.
func (j *Journal) sizedBatches(n, max int, size func(i int) (bytes, keys int), fn func(start, end int) error) error {
	budgetBytes, budgetKeys := j.txnBudget()
	for start := 0; start < n; {
		end := start
		var bytes, keys int64
		for end < n && end-start < max {
			b, k := size(end)
			// Badger counts 12 bytes more per key (version, metas).
			b += 12 * k
			if end > start && (bytes+int64(b) > budgetBytes || keys+int64(k) > budgetKeys) {
				break
			}
			bytes, keys = bytes+int64(b), keys+int64(k)
			end++
		}
		if err := fn(start, end); err != nil {
			return err
		}
		start = end
	}
	return nil
}
