package metalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func testOptions(dir string) Options {
	return Options{
		Dir: filepath.Join(dir, "log"),
		Badger: badger.DefaultOptions(filepath.Join(dir, "badger")).WithLogger(nil).
			WithMemTableSize(2 << 20).WithValueThreshold(1 << 10).WithValueLogFileSize(1 << 20),
		MemtableBytes: 2 << 10, // a few dozen records: rotations and checkpoints all the time
		MaxFrozen:     2,
	}
}

func open(t *testing.T, opts Options) *DB {
	t.Helper()
	db, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// state reads every key through an iterator and checks Get agrees.
func state(t *testing.T, db *DB) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := db.View(func(txn *Txn) error {
		it := txn.NewIterator(IteratorOptions{})
		defer it.Close()
		var prev []byte
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				return fmt.Errorf("iterator out of order: %q after %q", k, prev)
			}
			prev = k
			if bytes.Equal(k, checkpointKey) {
				continue
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			got[string(k)] = string(v)
			item, err := txn.Get(k)
			if err != nil {
				return fmt.Errorf("get %q: %w", k, err)
			}
			gv, _ := item.ValueCopy(nil)
			if !bytes.Equal(gv, v) {
				return fmt.Errorf("get %q = %q, iterator %q", k, gv, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// randomTxn applies a random transaction to db and to model.
func randomTxn(t *testing.T, rnd *rand.Rand, db *DB, model map[string]string) {
	t.Helper()
	next := maps.Clone(model)
	err := db.Update(func(txn *Txn) error {
		for range 1 + rnd.Intn(6) {
			k := fmt.Sprintf("k%03d", rnd.Intn(200))
			if rnd.Intn(3) == 0 {
				delete(next, k)
				if err := txn.Delete([]byte(k)); err != nil {
					return err
				}
			} else {
				v := fmt.Sprintf("v%d-%s", rnd.Int63(), bytes.Repeat([]byte("x"), rnd.Intn(100)))
				next[k] = v
				buf := []byte(v)
				if err := txn.Set([]byte(k), buf); err != nil {
					return err
				}
			}
			// Reads see the transaction's own writes.
			item, err := txn.Get([]byte(k))
			want, ok := next[k]
			switch {
			case !ok && !errors.Is(err, ErrKeyNotFound):
				return fmt.Errorf("get of deleted %q: %v", k, err)
			case ok && err != nil:
				return err
			case ok:
				v, _ := item.ValueCopy(nil)
				if string(v) != want {
					return fmt.Errorf("own write %q = %q, want %q", k, v, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(model, next)
	for k := range model {
		if _, ok := next[k]; !ok {
			delete(model, k)
		}
	}
}

func TestModel_ReopenAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	db := open(t, opts)
	defer func() { db.Close() }()
	rnd := rand.New(rand.NewSource(1))
	model := map[string]string{}
	for i := range 3000 {
		randomTxn(t, rnd, db, model)
		switch {
		case i%500 == 499:
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = open(t, opts)
		case i%250 == 0:
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		if i%100 == 0 {
			if got := state(t, db); !maps.Equal(got, model) {
				t.Fatalf("step %d: state differs from the model:\n got %v\nwant %v", i, got, model)
			}
		}
	}
	if got := state(t, db); !maps.Equal(got, model) {
		t.Fatalf("state differs from the model")
	}
}

// TestSnapshotIsolation: a transaction keeps reading what was committed
// when it started while later commits freeze memtables and the
// checkpointer moves them into Badger.
func TestSnapshotIsolation(t *testing.T) {
	db := open(t, testOptions(t.TempDir()))
	defer db.Close()
	rnd := rand.New(rand.NewSource(2))
	model := map[string]string{}
	for range 200 {
		randomTxn(t, rnd, db, model)
	}
	old := db.NewTransaction(false)
	defer old.Discard()
	frozen := maps.Clone(model)
	for range 2000 {
		randomTxn(t, rnd, db, model)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	it := old.NewIterator(IteratorOptions{Prefix: []byte("k")})
	for it.Rewind(); it.Valid(); it.Next() {
		v, _ := it.Item().ValueCopy(nil)
		got[string(it.Item().Key())] = string(v)
	}
	it.Close()
	if !maps.Equal(got, frozen) {
		t.Fatalf("an old transaction sees later commits: %d keys, want %d", len(got), len(frozen))
	}
	for k, v := range frozen {
		item, err := old.Get([]byte(k))
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		if b, _ := item.ValueCopy(nil); string(b) != v {
			t.Fatalf("get %q = %q, want %q", k, b, v)
		}
	}
	if got := state(t, db); !maps.Equal(got, model) {
		t.Fatal("the current state differs from the model")
	}
}

// copyTree copies dir to a new directory (a crash image: what the page
// cache holds when the process dies).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if info.Name() == "LOCK" {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCrashImages: at random points, a copy of the store (Badger and the
// log, taken while no checkpoint runs) reopens to exactly the committed
// state; with the last record torn, to the state before it.
func TestCrashImages(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	db := open(t, opts)
	defer db.Close()
	rnd := rand.New(rand.NewSource(3))
	model := map[string]string{}
	for round := range 12 {
		for range 50 + rnd.Intn(200) {
			randomTxn(t, rnd, db, model)
		}
		torn := round%2 == 1
		before := maps.Clone(model)
		randomTxn(t, rnd, db, model) // the last record
		for torn && db.cur.size == int64(len(segMagic)) {
			// It filled the memtable, which was frozen: tear one that
			// stays in the active segment.
			before = maps.Clone(model)
			randomTxn(t, rnd, db, model)
		}
		last := db.cur.first
		db.ckRun.Lock() // no checkpoint halfway through the copy
		img := filepath.Join(t.TempDir(), "img")
		copyTree(t, dir, img)
		db.ckRun.Unlock()
		if torn {
			// Cut a few bytes off the last record, as a write killed in
			// flight leaves it.
			p := filepath.Join(img, "log", segName(last))
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, st.Size()-3); err != nil {
				t.Fatal(err)
			}
		}
		io := testOptions(img)
		cdb := open(t, io)
		got := state(t, cdb)
		want := model
		if torn {
			want = before
		}
		if !maps.Equal(got, want) {
			t.Fatalf("round %d (torn %v): reopened image differs from the committed state", round, torn)
		}
		// It goes on from there: a commit after reopening survives another reopen.
		if err := cdb.Update(func(txn *Txn) error { return txn.Set([]byte("after"), []byte("crash")) }); err != nil {
			t.Fatal(err)
		}
		cdb.Close()
		cdb = open(t, io)
		got = state(t, cdb)
		cdb.Close()
		if got["after"] != "crash" {
			t.Fatalf("round %d: the commit after the crash was lost", round)
		}
	}
}

// TestGapDropsLaterSegments: a segment whose records do not follow the
// ones before (a record lost to power loss) is dropped with what follows.
func TestGapDropsLaterSegments(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.MemtableBytes = 1 << 30
	db := open(t, opts)
	for i := range 10 {
		if err := db.Update(func(txn *Txn) error { return txn.Set(fmt.Appendf(nil, "a%d", i), []byte("v")) }); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	// A segment that claims to start past a gap.
	seg, err := createSegment(opts.Dir, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := seg.append(encodeRecord(nil, 100, []write{{key: []byte("late"), val: []byte("v")}})); err != nil {
		t.Fatal(err)
	}
	seg.close()
	db = open(t, opts)
	defer db.Close()
	got := state(t, db)
	if _, ok := got["late"]; ok || len(got) != 10 {
		t.Fatalf("state after a gap: %v", slices.Sorted(maps.Keys(got)))
	}
	if _, err := os.Stat(seg.path); !os.IsNotExist(err) {
		t.Fatalf("the segment past the gap is still there: %v", err)
	}
}

func TestTxnTooBig(t *testing.T) {
	db := open(t, testOptions(t.TempDir()))
	defer db.Close()
	txn := db.NewTransaction(true)
	defer txn.Discard()
	val := make([]byte, 64<<10)
	var err error
	n := 0
	for ; n < 100000; n++ {
		if err = txn.Set(fmt.Appendf(nil, "big%06d", n), val); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrTxnTooBig) {
		t.Fatalf("set past the limits: %v", err)
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := len(state(t, db)); got != n {
		t.Fatalf("%d keys after the commit, want the %d before the refused one", got, n)
	}
}

// TestBacklogWaitsForGate: with the checkpointer held back, commits stop
// at MaxFrozen memtables with the gate's error, and go on once it passes.
func TestBacklogWaitsForGate(t *testing.T) {
	opts := testOptions(t.TempDir())
	full := errors.New("disk full")
	var blocked atomic.Bool
	blocked.Store(true)
	opts.CheckpointGate = func(int64) error {
		if blocked.Load() {
			return full
		}
		return nil
	}
	db := open(t, opts)
	defer db.Close()
	val := bytes.Repeat([]byte("v"), 512)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = db.Update(func(txn *Txn) error { return txn.Set(fmt.Appendf(nil, "k%d", i), val) })
	}
	if !errors.Is(err, full) {
		t.Fatalf("commits past the backlog: %v", err)
	}
	blocked.Store(false)
	if err := db.Update(func(txn *Txn) error { return txn.Set([]byte("later"), val) }); err != nil {
		t.Fatalf("commit after the checkpointer caught up: %v", err)
	}
}

// TestConcurrentReadersSeeWholeCommits: readers running while commits,
// freezes and checkpoints go on always see whole transactions: every
// commit sets all of its keys to one value, and moves a counter.
func TestConcurrentReadersSeeWholeCommits(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.MemtableBytes = 64 << 10
	db := open(t, opts)
	defer db.Close()
	const keys = 20
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				err := db.View(func(txn *Txn) error {
					it := txn.NewIterator(IteratorOptions{Prefix: []byte("c/")})
					defer it.Close()
					var first []byte
					n := 0
					for it.Rewind(); it.Valid(); it.Next() {
						v, _ := it.Item().ValueCopy(nil)
						if first == nil {
							first = v
						} else if !bytes.Equal(v, first) {
							return fmt.Errorf("key %q = %q, first key %q: a torn commit", it.Item().Key(), v, first)
						}
						n++
					}
					if n != 0 && n != keys {
						return fmt.Errorf("%d keys of a commit of %d", n, keys)
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 3000 {
		err := db.Update(func(txn *Txn) error {
			v := fmt.Appendf(nil, "%08d", i)
			for k := range keys {
				if err := txn.Set(fmt.Appendf(nil, "c/%02d", k), v); err != nil {
					return err
				}
			}
			// Filler, so that memtables fill and checkpoints run.
			return txn.Set(fmt.Appendf(nil, "f/%d", i%300), bytes.Repeat([]byte("f"), 200))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSyncCoversCheckpoints: a checkpoint of records nobody synced drops
// its segment without syncing Badger, and the next Sync syncs Badger (the
// records are in neither the log nor a synced Badger until then); one of
// records a Sync covered syncs Badger before its segment goes.
func TestSyncCoversCheckpoints(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.MemtableBytes = 1 << 30
	db := open(t, opts)
	defer db.Close()
	set := func(k string) {
		t.Helper()
		if err := db.Update(func(txn *Txn) error { return txn.Set([]byte(k), []byte("v")) }); err != nil {
			t.Fatal(err)
		}
	}
	unsynced := func() bool {
		db.segMu.Lock()
		defer db.segMu.Unlock()
		return db.unsynced
	}
	set("a")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if !unsynced() {
		t.Fatal("an unsynced checkpoint is not marked for the next Sync")
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if unsynced() {
		t.Fatal("Sync left the checkpoint unsynced")
	}
	set("b")
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if unsynced() {
		t.Fatal("the checkpoint of synced records did not sync Badger itself")
	}
	if got := state(t, db); len(got) != 2 {
		t.Fatalf("state %v", got)
	}
}

// TestCheckpointTooBigForOneTxn: a table more than one Badger transaction
// holds goes in a write batch, Badger synced before its segment goes, and
// reads back after a reopen.
func TestCheckpointTooBigForOneTxn(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.MemtableBytes = 1 << 30 // one table for everything below
	db := open(t, opts)
	want := map[string]string{}
	perTxn := int(db.MaxBatchCount()) / 2
	for round := range 4 {
		err := db.Update(func(txn *Txn) error {
			for i := range perTxn {
				k, v := fmt.Sprintf("k%d-%06d", round, i), fmt.Sprintf("v%d", i)
				want[k] = v
				if err := txn.Set([]byte(k), []byte(v)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	m := db.mems[0]
	if atomic, err := db.writeOneTxn(m, []byte("12345678")); err != nil || atomic {
		t.Fatalf("a table of %d keys fit one transaction (%v): the test needs a bigger one", len(want), err)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	db.segMu.Lock()
	unsynced := db.unsynced
	db.segMu.Unlock()
	if unsynced {
		t.Fatal("a checkpoint in several transactions left Badger unsynced")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(t, opts)
	defer db.Close()
	if got := state(t, db); !maps.Equal(got, want) {
		t.Fatalf("after the checkpoint and a reopen: %d keys, want %d", len(got), len(want))
	}
}
