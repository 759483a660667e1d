package metalog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// Options configure a DB.
type Options struct {
	// Dir holds the log segments.
	Dir string
	// Badger opens the checkpointed store.
	Badger badger.Options
	// MemtableBytes is the size at which the active memtable is frozen
	// and checkpointed (default 2 MiB).
	MemtableBytes int64
	// MaxFrozen is how many frozen memtables may wait for the
	// checkpointer before Commit waits for it (default 2).
	MaxFrozen int
	// CheckpointGate, if set, is asked before a checkpoint writes about
	// the given bytes to Badger; while it returns an error the checkpoint
	// waits (the journal's full-disk guard: Badger writes through mmap).
	CheckpointGate func(bytes int64) error
	// Logf reports checkpoint failures.
	Logf func(format string, args ...any)
}

// checkpointKey holds, in Badger, the sequence number of the last record
// Badger holds. Outside the journal's key space ("m", "e").
var checkpointKey = []byte("\x00metalog.checkpoint")

// retryPause is how long the checkpointer waits after a failure.
const retryPause = 50 * time.Millisecond

// DB is the journal's metadata store. Its methods are safe for concurrent
// use; commits are serialised.
type DB struct {
	bdb  *badger.DB
	opts Options

	// wmu serialises commits and guards the current segment and the
	// record buffer.
	wmu    sync.Mutex
	cur    *segment // the active memtable's segment
	buf    []byte   // record encoding buffer
	broken error    // set once an append could not be undone

	// segMu guards the list of open segments (Sync's work).
	segMu    sync.Mutex
	segs     []*segment // every open segment, oldest first (cur last)
	dirNew   bool       // a segment was created since the directory was synced
	unsynced bool       // a checkpoint dropped a segment without syncing Badger

	// mu guards mems and seq: readers take a snapshot of both.
	mu   sync.RWMutex
	mems []*memtable // newest first: mems[0] is the active memtable
	seq  uint64      // sequence number of the last committed record

	// ckRun is held while the checkpointer writes a table (tests hold it
	// to copy a consistent image of the store).
	ckRun sync.Mutex

	// ckMu guards the checkpointer's state; progress is closed (and
	// replaced) whenever a checkpoint finishes or fails.
	ckMu     sync.Mutex
	progress chan struct{}
	ckErr    error
	closed   bool
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

// Open opens the store: Badger, then the log segments after Badger's
// checkpoint, replayed into memtables.
func Open(opts Options) (*DB, error) {
	if opts.MemtableBytes <= 0 {
		opts.MemtableBytes = 2 << 20
	}
	if opts.MaxFrozen <= 0 {
		opts.MaxFrozen = 2
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create metadata log directory: %w", err)
	}
	bdb, err := badger.Open(opts.Badger)
	if err != nil {
		return nil, err
	}
	db := &DB{bdb: bdb, opts: opts, progress: make(chan struct{}), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	checkpoint, err := db.readCheckpoint()
	if err != nil {
		bdb.Close()
		return nil, err
	}
	mems, last, err := replay(opts.Dir, checkpoint)
	if err != nil {
		bdb.Close()
		return nil, err
	}
	cur, err := createSegment(opts.Dir, last+1)
	if err != nil {
		for _, m := range mems {
			m.seg.close()
		}
		bdb.Close()
		return nil, err
	}
	db.cur, db.seq, db.dirNew = cur, last, true
	db.mems = []*memtable{newMemtable(cur)}
	for i := len(mems) - 1; i >= 0; i-- {
		db.mems = append(db.mems, mems[i]) // newest first
	}
	for _, m := range mems {
		db.segs = append(db.segs, m.seg)
	}
	db.segs = append(db.segs, cur)
	go db.checkpointer()
	if len(mems) > 0 {
		db.kick()
	}
	return db, nil
}

func (db *DB) readCheckpoint() (uint64, error) {
	var seq uint64
	err := db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(checkpointKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: checkpoint record of %d bytes", ErrCorrupt, len(v))
			}
			seq = binary.LittleEndian.Uint64(v)
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("read metadata checkpoint: %w", err)
	}
	return seq, nil
}

// MaxBatchSize and MaxBatchCount are a transaction's limits: Badger's, so
// that a checkpoint never holds a record Badger could not.
func (db *DB) MaxBatchSize() int64  { return db.bdb.MaxBatchSize() }
func (db *DB) MaxBatchCount() int64 { return db.bdb.MaxBatchCount() }

// commit appends t's writes to the log as one record and applies them.
func (db *DB) commit(t *Txn) error {
	db.wmu.Lock()
	defer db.wmu.Unlock()
	if db.broken != nil {
		return db.broken
	}
	if db.isClosed() {
		return ErrClosed
	}
	if err := db.waitBacklog(); err != nil {
		return err
	}
	seq := db.seq + 1
	db.buf = encodeRecord(db.buf[:0], seq, t.writes)
	if err := db.cur.append(db.buf); err != nil {
		if errors.Is(err, ErrBroken) {
			db.broken = err
		}
		return err
	}
	if cap(db.buf) > 1<<20 {
		db.buf = nil // a big transaction's buffer is not kept
	}
	// The memtable keeps the keys and values: copy them into one
	// allocation, the caller may reuse its buffers.
	ws := t.ownedWrites()
	db.mu.RLock()
	active := db.mems[0]
	db.mu.RUnlock()
	active.apply(seq, ws)
	db.mu.Lock()
	db.seq = seq
	db.mu.Unlock()
	if active.bytes >= db.opts.MemtableBytes {
		db.rotate(seq + 1)
	}
	return nil
}

// rotate freezes the active memtable and starts a segment at next. A
// failure to create the segment leaves the memtable active (tried again
// at the next commit).
func (db *DB) rotate(next uint64) {
	seg, err := createSegment(db.opts.Dir, next)
	if err != nil {
		db.opts.Logf("metadata log: %v (the current segment keeps growing)", err)
		return
	}
	db.cur = seg
	db.segMu.Lock()
	db.segs, db.dirNew = append(db.segs, seg), true
	db.segMu.Unlock()
	db.mu.Lock()
	db.mems = append([]*memtable{newMemtable(seg)}, db.mems...)
	db.mu.Unlock()
	db.kick()
}

// waitBacklog waits while MaxFrozen memtables wait for the checkpointer;
// if the checkpointer's next attempt fails, it returns that error.
func (db *DB) waitBacklog() error {
	for db.frozen() >= db.opts.MaxFrozen {
		if err := db.awaitCheckpoint(); err != nil {
			return fmt.Errorf("metadata checkpoint behind: %w", err)
		}
	}
	return nil
}

func (db *DB) frozen() int {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return len(db.mems) - 1
}

// awaitCheckpoint wakes the checkpointer and waits for its next attempt,
// returning that attempt's error.
func (db *DB) awaitCheckpoint() error {
	db.ckMu.Lock()
	progress, closed := db.progress, db.closed
	db.ckMu.Unlock()
	if closed {
		return ErrClosed
	}
	db.kick()
	<-progress
	db.ckMu.Lock()
	defer db.ckMu.Unlock()
	if db.closed {
		return ErrClosed
	}
	return db.ckErr
}

func (db *DB) kick() {
	select {
	case db.wake <- struct{}{}:
	default:
	}
}

func (db *DB) isClosed() bool {
	db.ckMu.Lock()
	defer db.ckMu.Unlock()
	return db.closed
}

// notify wakes those waiting for the checkpointer, with its last error.
func (db *DB) notify(err error) {
	db.ckMu.Lock()
	db.ckErr = err
	close(db.progress)
	db.progress = make(chan struct{})
	db.ckMu.Unlock()
}

func (db *DB) checkpointer() {
	defer close(db.done)
	for {
		select {
		case <-db.stop:
			return
		case <-db.wake:
		}
		for {
			db.mu.RLock()
			var m *memtable
			if len(db.mems) > 1 {
				m = db.mems[len(db.mems)-1]
			}
			db.mu.RUnlock()
			if m == nil {
				break
			}
			db.ckRun.Lock()
			err := db.checkpoint(m, true)
			db.ckRun.Unlock()
			db.notify(err)
			if err != nil {
				db.opts.Logf("metadata checkpoint: %v (retrying)", err)
				select {
				case <-db.stop:
					return
				case <-db.wake:
				case <-time.After(retryPause):
				}
			}
		}
	}
}

// checkpoint writes the frozen memtable m (the oldest) to Badger with its
// last sequence number, then drops m and its segment.
//
// A table that fits in one Badger transaction (the usual case: tables are
// smaller than Badger's limit) is written in one, checkpoint included:
// atomic in Badger's write-ahead log, so power loss leaves Badger at this
// checkpoint or the one before, and the segment may go without syncing
// Badger, unless the segment was synced (an fsync promised its records):
// then Badger is synced first. Otherwise Sync syncs Badger before it
// returns. A bigger table takes a write batch, not atomic, so Badger is
// synced before its segment goes.
func (db *DB) checkpoint(m *memtable, gated bool) error {
	if gated && db.opts.CheckpointGate != nil {
		if err := db.opts.CheckpointGate(m.bytes); err != nil {
			return err
		}
	}
	mark := binary.LittleEndian.AppendUint64(nil, m.last)
	atomic, err := db.writeOneTxn(m, mark)
	if err != nil {
		return err
	}
	if !atomic {
		if err := db.writeBatch(m, mark); err != nil {
			return err
		}
	}
	db.segMu.Lock()
	mustSync := !atomic || m.seg.synced
	if !mustSync {
		db.unsynced = true
	}
	db.segMu.Unlock()
	if mustSync {
		if err := db.bdb.Sync(); err != nil {
			return fmt.Errorf("sync checkpoint: %w", err)
		}
	}
	db.mu.Lock()
	if n := len(db.mems); n > 1 && db.mems[n-1] == m {
		db.mems = db.mems[: n-1 : n-1] // readers may hold the old slice
	}
	db.mu.Unlock()
	db.segMu.Lock()
	for i, s := range db.segs {
		if s == m.seg {
			db.segs = append(db.segs[:i:i], db.segs[i+1:]...)
			break
		}
	}
	db.segMu.Unlock()
	return m.seg.remove()
}

// writeTable sets or deletes the newest version of each key of m in w (a
// Badger transaction or write batch).
func writeTable(m *memtable, w interface {
	Set(key, val []byte) error
	Delete(key []byte) error
}) error {
	return m.newest(func(e entry) error {
		if e.del {
			return w.Delete(e.key)
		}
		return w.Set(e.key, e.val)
	})
}

// writeOneTxn writes m and the checkpoint mark in one Badger transaction;
// false (nothing written) if they do not fit in one.
func (db *DB) writeOneTxn(m *memtable, mark []byte) (bool, error) {
	txn := db.bdb.NewTransaction(true)
	defer txn.Discard()
	err := writeTable(m, txn)
	if err == nil {
		err = txn.Set(checkpointKey, mark)
	}
	if errors.Is(err, badger.ErrTxnTooBig) {
		return false, nil
	}
	if err == nil {
		err = txn.Commit()
	}
	if err != nil {
		return false, fmt.Errorf("write checkpoint: %w", err)
	}
	return true, nil
}

// writeBatch writes m in a write batch, then the checkpoint mark.
func (db *DB) writeBatch(m *memtable, mark []byte) error {
	wb := db.bdb.NewWriteBatch()
	if err := writeTable(m, wb); err != nil {
		wb.Cancel()
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	err := db.bdb.Update(func(txn *badger.Txn) error { return txn.Set(checkpointKey, mark) })
	if err != nil {
		return fmt.Errorf("record checkpoint: %w", err)
	}
	return nil
}

// Sync makes every committed record durable against power loss: the
// segments written since the last Sync, and Badger if a checkpoint that
// was not synced dropped a segment since.
func (db *DB) Sync() error {
	db.segMu.Lock()
	defer db.segMu.Unlock()
	for _, s := range db.segs {
		if err := s.sync(); err != nil {
			return err
		}
	}
	if db.dirNew {
		if err := syncDir(db.opts.Dir); err != nil {
			return err
		}
		db.dirNew = false
	}
	if db.unsynced {
		if err := db.bdb.Sync(); err != nil {
			return fmt.Errorf("sync metadata checkpoints: %w", err)
		}
		db.unsynced = false
	}
	return nil
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync metadata log directory: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync metadata log directory: %w", err)
	}
	return nil
}

// Checkpoint writes everything committed so far to Badger and empties the
// log (Close does it; tests use it to check recovery from Badger alone).
func (db *DB) Checkpoint() error {
	db.wmu.Lock()
	if db.broken != nil {
		db.wmu.Unlock()
		return db.broken
	}
	db.mu.RLock()
	empty := db.mems[0].bytes == 0
	db.mu.RUnlock()
	if !empty {
		db.rotate(db.seq + 1)
	}
	db.wmu.Unlock()
	for db.frozen() > 0 {
		if err := db.awaitCheckpoint(); err != nil {
			return err
		}
	}
	return nil
}

// Close checkpoints what the log holds (what it cannot, the next Open
// replays) and closes Badger. Transactions must be finished.
func (db *DB) Close() error {
	cerr := db.Checkpoint()
	db.ckMu.Lock()
	if db.closed {
		db.ckMu.Unlock()
		return ErrClosed
	}
	db.closed = true
	close(db.progress)
	db.progress = make(chan struct{})
	db.ckMu.Unlock()
	close(db.stop)
	<-db.done
	db.wmu.Lock()
	defer db.wmu.Unlock()
	db.segMu.Lock()
	defer db.segMu.Unlock()
	var errs []error
	if cerr != nil {
		db.opts.Logf("metadata checkpoint at close: %v (the next open replays the log)", cerr)
	}
	for _, s := range db.segs {
		if err := s.sync(); err != nil {
			errs = append(errs, err)
		}
		s.close()
	}
	db.segs = nil
	errs = append(errs, db.bdb.Close())
	return errors.Join(errs...)
}
