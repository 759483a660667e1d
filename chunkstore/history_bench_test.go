package chunkstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

// bigTrees stores the trees of a workspace of dirs x perDir small files and
// returns the root tree's ID; files named in changed get other content.
func bigTrees(b *testing.B, st *chunkstore.Store, dirs, perDir int, changed map[string]bool) chunkstore.ID {
	b.Helper()
	ctx := context.Background()
	root := &chunkstore.Tree{}
	ino := uint64(2)
	for d := range dirs {
		t := &chunkstore.Tree{}
		dname := fmt.Sprintf("d%04d", d)
		for f := range perDir {
			name := fmt.Sprintf("f%05d", f)
			data := []byte("content of " + dname + "/" + name)
			if changed[dname+"/"+name] {
				data = append(data, " (changed)"...)
			}
			ino++
			t.Entries = append(t.Entries, chunkstore.Entry{Name: name, Type: chunkstore.TypeRegular, Mode: 0o644,
				Ino: ino, Nlink: 1, Size: uint64(len(data)), Inline: data, Mtime: 1, Ctime: 1, Atime: 1})
		}
		id, err := st.PutTree(ctx, t)
		if err != nil {
			b.Fatal(err)
		}
		ino++
		root.Entries = append(root.Entries, chunkstore.Entry{Name: dname, Type: chunkstore.TypeDir, Mode: 0o755, Ino: ino, Nlink: 2, Subtree: id})
	}
	id, err := st.PutTree(ctx, root)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return id
}

// BenchmarkDiff100k: the diff of two 100k-file trees (100 directories of
// 1000 files) that differ in 10 files, in 10 directories. Cold: the store is
// opened anew each round, as `cairn diff` does.
func BenchmarkDiff100k(b *testing.B) {
	be := chunkstoretest.LocalBackend(b)
	st := chunkstoretest.NewStore(b, be, chunkstore.InitOptions{}, chunkstore.Options{})
	changed := map[string]bool{}
	for i := range 10 {
		changed[fmt.Sprintf("d%04d/f%05d", i*10, i*37)] = true
	}
	a := bigTrees(b, st, 100, 1000, nil)
	c := bigTrees(b, st, 100, 1000, changed)
	ctx := context.Background()
	for _, cold := range []bool{false, true} {
		b.Run(map[bool]string{false: "warm", true: "cold"}[cold], func(b *testing.B) {
			for b.Loop() {
				s := st
				if cold {
					var err error
					if s, err = chunkstore.Open(ctx, be, chunkstore.Options{}); err != nil {
						b.Fatal(err)
					}
				}
				d, err := s.Diff(ctx, a, c)
				if err != nil {
					b.Fatal(err)
				}
				if len(d) != 10 {
					b.Fatalf("%d changes, want 10", len(d))
				}
				if cold {
					s.Close()
				}
			}
		})
	}
}

// BenchmarkLog10k: walk the history of a workspace with 10k snapshots,
// reading every record (what `cairn log` prints), on a store opened anew.
func BenchmarkLog10k(b *testing.B) {
	const n = 10_000
	be := chunkstoretest.LocalBackend(b)
	st := chunkstoretest.NewStore(b, be, chunkstore.InitOptions{}, chunkstore.Options{})
	ctx := context.Background()
	root := bigTrees(b, st, 1, 10, nil)
	var parent chunkstore.ID
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		snap := &chunkstore.Snapshot{Root: root, Workspace: "w", Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Minute),
			Message: fmt.Sprintf("turn %d", i+1), Labels: map[string]string{"turn": fmt.Sprint(i + 1)},
			Stats: chunkstore.SnapshotStats{Files: 10, Dirs: 2, ChangedFiles: 3, ChangedBytes: 300},
			Changes: []chunkstore.Change{{Path: "d0000/f00001", Op: chunkstore.ChangeModified, Size: 100},
				{Path: "d0000/f00002", Op: chunkstore.ChangeAdded, Size: 100}, {Path: "d0000/f00003", Op: chunkstore.ChangeRemoved, Size: 100}}}
		if !parent.IsZero() {
			snap.Parents = []chunkstore.ID{parent}
		}
		id, err := st.PutSnapshot(ctx, snap)
		if err != nil {
			b.Fatal(err)
		}
		parent = id
	}
	if _, err := st.SetRef(ctx, "w", parent, nil); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := chunkstore.Open(ctx, be, chunkstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		id, err := s.Resolve(ctx, "w")
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		err = s.History(ctx, id, 0, func(chunkstore.ID, *chunkstore.Snapshot) error { got++; return nil })
		if err != nil || got != n {
			b.Fatalf("history: %d records, %v", got, err)
		}
		s.Close()
	}
}
