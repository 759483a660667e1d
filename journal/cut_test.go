package journal_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

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

// gatedFS holds the first read of a staging file opened read-only (the
// snapshot's own descriptor) after it is armed, until released.
type gatedFS struct {
	journal.OSFS
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed when a read is held
	release chan struct{}
}

func (g *gatedFS) OpenFile(name string, flag int, perm os.FileMode) (journal.File, error) {
	f, err := g.OSFS.OpenFile(name, flag, perm)
	if err != nil || flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		return f, err
	}
	return &gatedFile{File: f, g: g}, nil
}

type gatedFile struct {
	journal.File
	g *gatedFS
}

func (f *gatedFile) ReadAt(p []byte, off int64) (int, error) {
	f.g.mu.Lock()
	hold := f.g.armed
	f.g.armed = false
	f.g.mu.Unlock()
	if hold {
		close(f.g.entered)
		<-f.g.release
	}
	return f.File.ReadAt(p, off)
}

// A write to a frozen file the snapshot has not read yet does not wait for
// the file the snapshot is reading: the operation reads its own file for
// the snapshot (thaw). Here the snapshot's read of a big file is held until
// a write to a small file, which the walk reaches later, has returned.
func TestSnapshot_WriteDoesNotWaitForTheWalk(t *testing.T) {
	e := newEnv(t)
	g := &gatedFS{entered: make(chan struct{}), release: make(chan struct{})}
	j := openFaulty(t, e, t.TempDir(), g)
	rnd := rand.New(rand.NewPCG(3, 4))
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	file := func(name string, data []byte) journal.Ino {
		t.Helper()
		a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, name, 0o644))
		must[int](t)(j.Write(ctx, journal.Root, a.Ino, data, 0))
		return a.Ino
	}
	file("a-big", big)
	small := file("z-small", []byte("before the cut"))
	mid := file("m-mid", bytes.Repeat([]byte("mid "), 20000)) // stored, not inline
	atCut := tree(t, j)

	wrote := make(chan error, 1)
	journal.SetAfterCut(func() {
		g.mu.Lock()
		g.armed = true
		g.mu.Unlock()
		go func() {
			<-g.entered // the walk reads a-big, and is held there
			_, err := j.Write(ctx, journal.Root, small, []byte("after the cut!"), 0)
			if err == nil {
				_, err = j.SetAttr(ctx, journal.Root, mid, journal.SetAttrIn{Valid: journal.SetSize, Size: 3})
			}
			wrote <- err
		}()
	})
	defer journal.SetAfterCut(nil)
	snapped := make(chan error, 1)
	var id chunkstore.ID
	go func() {
		var err error
		id, err = j.Snapshot(ctx, journal.SnapshotOptions{})
		snapped <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a deadlock, not a slow machine
		close(g.release)
		t.Fatal("the write to a frozen small file waited for the snapshot's read of another file")
	}
	close(g.release)
	err := <-snapped
	journal.SetAfterCut(nil)
	if err != nil {
		t.Fatal(err)
	}
	assertTree(t, "the snapshot", tree(t, e.open("fork", t.TempDir(), id)), atCut)
	live := tree(t, j)
	id2 := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	assertTree(t, "the next snapshot", tree(t, e.open("fork2", t.TempDir(), id2)), live)
}
