package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/journal/internal/metalog"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

// Cut-short tests: writeSplit stopped after its k-th transaction, as a
// crash between two transactions would leave the journal; the journal is
// then closed without writing anything more and reopened.

var errCut = errors.New("cut short (test)")

// cutAfter makes writeSplit stop after its k-th transaction (0: never) and
// counts the transactions it commits before its last.
func cutAfter(t *testing.T, k int, commits *int) {
	t.Helper()
	splitCommitted = func(n int) error {
		if commits != nil {
			*commits = n
		}
		if n == k {
			return errCut
		}
		return nil
	}
	t.Cleanup(func() { splitCommitted = nil })
}

type splitEnv struct {
	t     *testing.T
	store *chunkstore.Store
}

func newSplitEnv(t *testing.T) *splitEnv {
	return &splitEnv{t: t, store: chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})}
}

// open opens ws in dir; the caller closes it.
func (e *splitEnv) open(ws, dir string) *Journal {
	e.t.Helper()
	j, err := Open(context.Background(), Config{Dir: dir, Store: e.store, Workspace: ws})
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	return j
}

func splitContent(i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("<%07d>", i)), 500)[:4000]
}

// fill creates /d with files of 4,000 bytes.
func fill(t *testing.T, j *Journal, files int) {
	t.Helper()
	ctx := context.Background()
	d, err := j.Mkdir(ctx, Root, RootIno, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		f, err := j.Create(ctx, Root, d.Ino, fmt.Sprintf("f%05d", i), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Write(ctx, Root, f.Ino, splitContent(i), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// verify lists /d and reads every file back; extra names a file with the
// content "extra" that /d also holds.
func verify(t *testing.T, j *Journal, files int, extra string) {
	t.Helper()
	ctx := context.Background()
	d, err := j.Lookup(ctx, RootIno, "d")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := j.ReadDir(ctx, d.Ino)
	if err != nil {
		t.Fatalf("ReadDir: %v", err)
	}
	want := files
	if extra != "" {
		want++
	}
	if len(ents) != want {
		t.Fatalf("/d has %d entries, want %d", len(ents), want)
	}
	for _, e := range ents {
		exp := []byte("extra")
		if e.Name != extra {
			var i int
			if _, err := fmt.Sscanf(e.Name, "f%05d", &i); err != nil {
				t.Fatalf("unexpected /d/%s", e.Name)
			}
			exp = splitContent(i)
		}
		buf := make([]byte, 5000)
		n, err := j.Read(ctx, e.Ino, buf, 0)
		if err != nil || !bytes.Equal(buf[:n], exp) {
			t.Fatalf("/d/%s: read %d bytes (%v) that differ from the %d written", e.Name, n, err, len(exp))
		}
	}
}

// keys counts the current epoch's keys of one kind ('d' dentries, 'p'
// links, 'i' inodes, 'U' a commit's records to save).
func keys(t *testing.T, j *Journal, kind byte) int {
	t.Helper()
	n := 0
	err := j.db.View(func(txn *metalog.Txn) error {
		it := txn.NewIterator(metalog.IteratorOptions{Prefix: append(epochPrefix(j.m.Epoch), kind)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSplit_LoadCutShort: a directory load stopped after any of its
// transactions leaves the directory unloaded; reopened (or retried), the
// journal loads it again, whole, over the entries written before.
func TestSplit_LoadCutShort(t *testing.T) {
	const files = 3000 // 12 MB of inline content: several transactions
	e := newSplitEnv(t)
	ctx := context.Background()
	w := e.open("ws", t.TempDir())
	fill(t, w, files)
	if _, err := w.Snapshot(ctx, SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	// How many transactions a whole load takes.
	var commits int
	cutAfter(t, 0, &commits)
	j := e.open("ws", t.TempDir())
	verify(t, j, files, "")
	j.Close()
	if commits < 2 {
		t.Fatalf("the load took %d transactions; the test needs several", commits+1)
	}
	for k := 1; k <= commits; k++ {
		t.Run(fmt.Sprintf("after=%d", k), func(t *testing.T) {
			dir := t.TempDir()
			cutAfter(t, k, nil)
			j := e.open("ws", dir)
			d, err := j.Lookup(ctx, RootIno, "d")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j.ReadDir(ctx, d.Ino); !errors.Is(err, ErrIO) {
				t.Fatalf("ReadDir cut short: %v", err)
			}
			n, err := j.inode(d.Ino)
			if err != nil {
				t.Fatal(err)
			}
			if n.Loaded || keys(t, j, 'd') == 0 {
				t.Fatalf("after the cut: loaded %v, %d dentries", n.Loaded, keys(t, j, 'd'))
			}
			// A retry in the same process loads it whole.
			if k%2 == 0 {
				splitCommitted = nil
				verify(t, j, files, "")
			}
			j.Close()

			splitCommitted = nil
			j = e.open("ws", dir)
			defer j.Close()
			verify(t, j, files, "")
			// Exactly one dentry, link and record per file: nothing dangles.
			if d, p, i := keys(t, j, 'd'), keys(t, j, 'p'), keys(t, j, 'i'); d != files+1 || p != files || i != files+2 {
				t.Fatalf("keys: %d dentries, %d links, %d records; want %d, %d, %d", d, p, i, files+1, files, files+2)
			}
			// And it snapshots.
			if _, err := j.Snapshot(ctx, SnapshotOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSplit_SnapshotCutShort: the records a snapshot updates after its ref
// moved, stopped after their first transaction. The snapshot is done: the
// next one (in the same process, or after a reopen) is its child, and
// every file reads back.
func TestSplit_SnapshotCutShort(t *testing.T) {
	const files = 1500
	for _, reopen := range []bool{false, true} {
		t.Run(fmt.Sprintf("reopen=%v", reopen), func(t *testing.T) {
			e := newSplitEnv(t)
			ctx := context.Background()
			dir := t.TempDir()
			j := e.open("ws", dir)
			defer func() { j.Close() }()
			fill(t, j, files)
			cutAfter(t, 1, nil)
			id1, err := j.Snapshot(ctx, SnapshotOptions{})
			if !errors.Is(err, ErrIO) || id1.IsZero() {
				t.Fatalf("snapshot cut short: %v", err)
			}
			splitCommitted = nil
			ref, err := e.store.Ref(ctx, "ws")
			if err != nil || ref.Snapshot != id1 {
				t.Fatalf("ref %v (%v), want the snapshot %s", ref.Snapshot, err, id1.Short())
			}
			if reopen {
				j.Close()
				j = e.open("ws", dir)
			}
			if j.Base() != id1 {
				t.Fatalf("base %s, want %s", j.Base().Short(), id1.Short())
			}
			verify(t, j, files, "")
			d, err := j.Lookup(ctx, RootIno, "d")
			if err != nil {
				t.Fatal(err)
			}
			x, err := j.Create(ctx, Root, d.Ino, "extra", 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j.Write(ctx, Root, x.Ino, []byte("extra"), 0); err != nil {
				t.Fatal(err)
			}
			id2, err := j.Snapshot(ctx, SnapshotOptions{})
			if err != nil {
				t.Fatalf("the snapshot after: %v", err)
			}
			var ids []chunkstore.ID
			if err := e.store.History(ctx, id2, 0, func(id chunkstore.ID, _ *chunkstore.Snapshot) error {
				ids = append(ids, id)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if want := []chunkstore.ID{id2, id1}; !slices.Equal(ids, want) {
				t.Fatalf("history %v, want %v", ids, want)
			}
			if s, err := j.Status(ctx); err != nil || s.DirtyInodes != 0 || s.Base != id2 {
				t.Fatalf("status after the next snapshot: %+v, %v", s, err)
			}
			other := e.open("ws", t.TempDir())
			defer other.Close()
			verify(t, other, files, "extra")
			fork, err := Open(ctx, Config{Dir: t.TempDir(), Store: e.store, Workspace: "fork", From: id1})
			if err != nil {
				t.Fatal(err)
			}
			defer fork.Close()
			verify(t, fork, files, "")
		})
	}
}

// TestCommit_UpdatesWaitInTheJournal: the records a big commit saves once
// its snapshot is the head wait in the journal while it runs (spill), not
// in memory, and none are left after it.
func TestCommit_UpdatesWaitInTheJournal(t *testing.T) {
	const files = 1500 // 6 MB of inline content: several spills
	e := newSplitEnv(t)
	j := e.open("ws", t.TempDir())
	defer j.Close()
	fill(t, j, files)
	count := func() int { return keys(t, j, 'U') }
	most := 0
	splitCommitted = func(int) error {
		most = max(most, count())
		return nil
	}
	t.Cleanup(func() { splitCommitted = nil })
	if _, err := j.Snapshot(context.Background(), SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	// More than one spill's worth was in the journal at once (what is
	// applied is deleted as it goes, so not all of them).
	if most*4000 <= spillBytes {
		t.Fatalf("at most %d records waited in the journal during the commit of %d files", most, files)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d records left in the journal after the commit", n)
	}
	verify(t, j, files, "")
}
