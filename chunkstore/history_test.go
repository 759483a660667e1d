package chunkstore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

func TestStore_History(t *testing.T) {
	dir := t.TempDir()
	be, err := local.Open(dir, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	st := chunkstoretest.NewStore(t, be, chunkstore.InitOptions{}, chunkstore.Options{})
	root, err := st.PutTree(ctx, &chunkstore.Tree{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	var ids []chunkstore.ID
	for i := range n {
		snap := &chunkstore.Snapshot{Root: root, Workspace: "w", Seq: uint64(i + 1), Time: time.Unix(int64(i), 0),
			Message: fmt.Sprintf(`turn %d "parents":["%s"]`, i+1, chunkstore.ID{}), // a message that looks like the field
			Changes: []chunkstore.Change{{Path: "a", Op: chunkstore.ChangeAdded, Size: 1}}}
		if i > 0 {
			snap.Parents = []chunkstore.ID{ids[i-1]}
		}
		id, err := st.PutSnapshot(ctx, snap)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	walk := func(from chunkstore.ID, limit int) ([]uint64, error) {
		var seqs []uint64
		err := st.History(ctx, from, limit, func(id chunkstore.ID, s *chunkstore.Snapshot) error {
			if ids[s.Seq-1] != id || s.Changes != nil {
				return fmt.Errorf("record %s: seq %d, changes %v", id.Short(), s.Seq, s.Changes)
			}
			seqs = append(seqs, s.Seq)
			return nil
		})
		return seqs, err
	}
	seqs, err := walk(ids[n-1], 0)
	if err != nil || len(seqs) != n || seqs[0] != n || seqs[n-1] != 1 {
		t.Fatalf("full walk: %d records (%v...), %v", len(seqs), seqs[:min(3, len(seqs))], err)
	}
	for i := 1; i < n; i++ {
		if seqs[i] != seqs[i-1]-1 {
			t.Fatalf("out of order at %d: %d after %d", i, seqs[i], seqs[i-1])
		}
	}
	if seqs, err := walk(ids[n-1], 5); err != nil || len(seqs) != 5 || seqs[4] != n-4 {
		t.Fatalf("limit 5: %v, %v", seqs, err)
	}
	// fn's error stops the walk, and no goroutine is left behind.
	goroutines := runtime.NumGoroutine()
	stop := errors.New("stop")
	calls := 0
	err = st.History(ctx, ids[n-1], 0, func(chunkstore.ID, *chunkstore.Snapshot) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("stop: %v after %d calls", err, calls)
	}
	time.Sleep(50 * time.Millisecond)
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Errorf("%d goroutines after a stopped walk, %d before", g, goroutines)
	}
	// A record that does not match its ID, and a missing one, end the walk
	// with the right error once the walk reaches them.
	key := filepath.Join(dir, "snapshots", ids[100].String())
	good, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 1
	os.WriteFile(key, bad, 0o644)
	seqs, err = walk(ids[n-1], 0)
	if !errors.Is(err, chunkstore.ErrCorrupt) || len(seqs) != n-101 {
		t.Errorf("corrupt record 101: %d records, %v", len(seqs), err)
	}
	os.Remove(key)
	seqs, err = walk(ids[n-1], 0)
	if !errors.Is(err, chunkstore.ErrNotFound) || len(seqs) != n-101 {
		t.Errorf("missing record 101: %d records, %v", len(seqs), err)
	}
	os.WriteFile(key, good, 0o644)
	// Resolve's WORKSPACE@N walks the history too.
	if _, err := st.SetRef(ctx, "w", ids[n-1], nil); err != nil {
		t.Fatal(err)
	}
	if id, err := st.Resolve(ctx, "w@7"); err != nil || id != ids[6] {
		t.Errorf("w@7 = %s, %v", id.Short(), err)
	}
	if _, err := st.Resolve(ctx, "w@301"); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Errorf("w@301: %v", err)
	}
}
