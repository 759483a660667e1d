package journal_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"
)

// A snapshot cuts under the lock and reads, chunks and packs without it:
// operations made after the cut neither wait for the snapshot (bar a write
// to a file it has yet to read, which waits for that file) nor reach it;
// they reach the next one, and survive a reopen.
func TestSnapshot_CutDoesNotStallTheMount(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	j := e.openUnmanaged(dir)
	rnd := rand.New(rand.NewPCG(1, 2))
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	file := func(parent journal.Ino, name string, size int) journal.Ino {
		t.Helper()
		a := must[journal.Attr](t)(j.Create(ctx, journal.Root, parent, name, 0o644))
		if _, err := j.Write(ctx, journal.Root, a.Ino, data(size), 0); err != nil {
			t.Fatal(err)
		}
		return a.Ino
	}
	d := must[journal.Attr](t)(j.Mkdir(ctx, journal.Root, journal.RootIno, "d", 0o755))
	for i := range 40 {
		file(d.Ino, fmt.Sprintf("f%02d", i), 256<<10)
	}
	big := file(journal.RootIno, "big", 16<<20)
	short := file(journal.RootIno, "short", 300<<10)
	file(journal.RootIno, "gone", 300<<10)
	file(journal.RootIno, "over", 300<<10)
	file(d.Ino, "tiny", 10)
	atCut := tree(t, j)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	journal.SetAfterCut(func() {
		// Metadata operations never wait for a snapshot: made here,
		// before it reads anything, they would deadlock if they did.
		nd := must[journal.Attr](t)(j.Mkdir(ctx, journal.Root, journal.RootIno, "new", 0o755))
		file(nd.Ino, "n", 5000)
		if _, err := j.SetAttr(ctx, journal.Root, d.Ino, journal.SetAttrIn{Valid: journal.SetMode, Mode: 0o700}); err != nil {
			t.Error(err)
		}
		if err := j.Rename(ctx, journal.Root, d.Ino, "f01", journal.RootIno, "f01-moved", 0); err != nil {
			t.Error(err)
		}
		must[[]journal.DirEntry](t)(j.ReadDir(ctx, d.Ino))
		must[journal.Attr](t)(j.Lookup(ctx, d.Ino, "f02"))
		// Changes to the bytes of files the snapshot has yet to read
		// wait for those files only.
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := j.Write(ctx, journal.Root, big, []byte("after the cut"), 0)
			fail(err)
			_, err = j.SetAttr(ctx, journal.Root, short, journal.SetAttrIn{Valid: journal.SetSize, Size: 10})
			fail(err)
			fail(j.Unlink(ctx, journal.Root, journal.RootIno, "gone"))
			fail(j.Rename(ctx, journal.Root, d.Ino, "tiny", journal.RootIno, "over", 0))
			f3 := must[journal.Attr](t)(j.Lookup(ctx, d.Ino, "f03"))
			_, err = j.Write(ctx, journal.Root, f3.Ino, []byte("f03 after the cut"), 100)
			fail(err)
		}()
	})
	id, err := j.Snapshot(ctx, journal.SnapshotOptions{})
	journal.SetAfterCut(nil)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	assertTree(t, "the snapshot", tree(t, e.open("fork1", t.TempDir(), id)), atCut)

	// What changed after the cut is dirty: the next snapshot has it.
	live := tree(t, j)
	if st := must[journal.Status](t)(j.Status(ctx)); st.DirtyInodes == 0 {
		t.Fatal("nothing dirty after changes made during a snapshot")
	}
	id2 := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	assertTree(t, "the next snapshot", tree(t, e.open("fork2", t.TempDir(), id2)), live)

	// And it survives a reopen (the markers of the new generation).
	journal.SetAfterCut(func() {
		f := must[journal.Attr](t)(j.Lookup(ctx, d.Ino, "f05"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := j.Write(ctx, journal.Root, f.Ino, []byte("during the third"), 0)
			fail(err)
		}()
	})
	must[journal.Attr](t)(j.SetAttr(ctx, journal.Root, big, journal.SetAttrIn{Valid: journal.SetSize, Size: 1 << 20}))
	id3 := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	journal.SetAfterCut(nil)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	live = tree(t, j)
	j.Close()
	j = e.openUnmanaged(dir)
	defer j.Close()
	assertTree(t, "the live state after a reopen", tree(t, j), live)
	id4 := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	if id4 == id3 {
		t.Fatal("a write made during a snapshot is not in the next one after a reopen")
	}
	assertTree(t, "the snapshot after a reopen", tree(t, e.open("fork4", t.TempDir(), id4)), live)
}

func assertTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if got[k] != want[k] {
			g, w := got[k], want[k]
			if len(g) > 200 {
				g = g[:200] + "..."
			}
			if len(w) > 200 {
				w = w[:200] + "..."
			}
			t.Errorf("%s: %s:\n got  %q\n want %q", what, k, g, w)
		}
	}
	t.FailNow()
}
