package journal_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"
)

// A file unlinked while open keeps its data until its last Release, and a
// crash with it open deletes it at the next Open.
func TestHandle_UnlinkedWhileOpen(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	// Quotas make StatFs report the journal's own counters.
	cfg := journal.Config{Dir: dir, Store: e.store, Workspace: "ws", Clock: e.clk.now, MaxInodes: 1000, MaxBytes: 1 << 20}
	j, err := journal.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	before := must[journal.StatFs](t)(j.StatFs(ctx))
	open := func(name string) (journal.Attr, *journal.Handle) {
		a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, name, 0o644))
		if _, err := j.Write(ctx, journal.Root, a.Ino, []byte("still here"), 0); err != nil {
			t.Fatal(err)
		}
		h := must[*journal.Handle](t)(j.Open(ctx, journal.Root, a.Ino, false, false))
		if err := j.Unlink(ctx, journal.Root, journal.RootIno, name); err != nil {
			t.Fatal(err)
		}
		return a, h
	}
	a, h := open("gone")
	if got := readAll(t, j, a.Ino); string(got) != "still here" {
		t.Fatalf("read after unlink: %q", got)
	}
	if at := must[journal.Attr](t)(j.GetAttr(ctx, a.Ino)); at.Nlink != 0 {
		t.Fatalf("nlink after unlink = %d, want 0", at.Nlink)
	}
	if _, err := j.Link(ctx, journal.Root, a.Ino, journal.RootIno, "back"); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("link to an unlinked file: %v, want ErrNotFound", err)
	}
	if _, err := j.Lookup(ctx, journal.RootIno, "gone"); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("lookup after unlink: %v", err)
	}
	if err := j.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := j.GetAttr(ctx, a.Ino); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("after the last release: GetAttr = %v, want ErrNotFound", err)
	}
	if after := must[journal.StatFs](t)(j.StatFs(ctx)); after.Ffree != before.Ffree || after.Bfree != before.Bfree {
		t.Fatalf("statfs after release: %+v, before: %+v", after, before)
	}

	// Killed with an unlinked file open: the next Open deletes it.
	b, _ := open("crashed")
	j.Close()
	if j, err = journal.Open(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := j.GetAttr(ctx, b.Ino); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("orphan after reopen: GetAttr = %v, want ErrNotFound", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "staging", "*", fmtAny(b.Ino))); len(left) != 0 {
		t.Fatalf("orphan's staging file left: %v", left)
	}
	if after := must[journal.StatFs](t)(j.StatFs(ctx)); after.Ffree != before.Ffree || after.Bfree != before.Bfree {
		t.Fatalf("statfs after reopen: %+v, before: %+v", after, before)
	}
}

// Writes through a backing file (what the kernel does with passthrough)
// show in attributes, snapshots (also after a snapshot while still open)
// and after a crash.
func TestHandle_PassthroughWriter(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	j := e.openUnmanaged(dir)
	a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
	if _, err := j.Write(ctx, journal.Root, a.Ino, []byte("0123456789"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Snapshot(ctx, journal.SnapshotOptions{}); err != nil { // f is clean now
		t.Fatal(err)
	}
	h := must[*journal.Handle](t)(j.Open(ctx, journal.Root, a.Ino, true, true))
	bf := h.Backing()
	if bf == nil {
		t.Fatal("no backing file for a plain writer")
	}
	write := func(p string, off int64) {
		t.Helper()
		if _, err := bf.WriteAt([]byte(p), off); err != nil {
			t.Fatal(err)
		}
	}
	checkSnap := func(want string) {
		t.Helper()
		id := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
		f := must[journal.Attr](t)(e.open("fork"+fmtAny(len(want)), t.TempDir(), id).Lookup(ctx, journal.RootIno, "f"))
		if f.Size != uint64(len(want)) {
			t.Fatalf("snapshot: size %d, want %d", f.Size, len(want))
		}
	}
	write("abcdefghijklmnop", 5)
	if at := must[journal.Attr](t)(j.GetAttr(ctx, a.Ino)); at.Size != 21 {
		t.Fatalf("size after a passthrough write: %d, want 21", at.Size)
	}
	checkSnap("01234abcdefghijklmnop")
	write("XYZ", 21) // after the snapshot, still open: still dirty
	checkSnap("01234abcdefghijklmnopXYZ")

	// Killed while open for writing after one more write: the next Open
	// takes the staging file's size.
	write("!", 24)
	j.Close()
	bf.Close()
	j = e.open("ws", dir, chunkstore.ID{})
	if got := readAll(t, j, a.Ino); string(got) != "01234abcdefghijklmnopXYZ!" {
		t.Fatalf("after reopen: %q", got)
	}

	// setuid files and byte quotas get no backing file: the journal must
	// see each write.
	if _, err := j.SetAttr(ctx, journal.Root, a.Ino, journal.SetAttrIn{Valid: journal.SetMode, Mode: 0o4755}); err != nil {
		t.Fatal(err)
	}
	h2 := must[*journal.Handle](t)(j.Open(ctx, journal.Root, a.Ino, true, true))
	if h2.Backing() != nil {
		t.Fatal("a setuid file got a backing file for writing")
	}
	if err := j.Release(ctx, h2); err != nil {
		t.Fatal(err)
	}
	// Readers of a staged file get one, cut to the file's size.
	h3 := must[*journal.Handle](t)(j.Open(ctx, journal.Root, a.Ino, false, true))
	if h3.Backing() == nil {
		t.Fatal("no backing file for a reader of a staged file")
	}
	got, err := readFile(h3.Backing())
	if err != nil || !bytes.Equal(got, []byte("01234abcdefghijklmnopXYZ!")) {
		t.Fatalf("backing file of a reader: %q, %v", got, err)
	}
	if err := j.Release(ctx, h3); err != nil {
		t.Fatal(err)
	}
}

func readFile(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	_, err = f.ReadAt(b, 0)
	return b, err
}

// Each operation that touches a file open for passthrough writing sees what
// the kernel wrote to its staging file, without a Release in between: no
// operation depends on every writer being scanned on every request.
func TestHandle_PassthroughWriterAdoptedPerOperation(t *testing.T) {
	e := newEnv(t)
	j := e.openUnmanaged(t.TempDir())
	ops := []struct {
		name string
		size func(ino journal.Ino) uint64 // the size the operation sees
	}{
		{"GetAttr", func(ino journal.Ino) uint64 { return must[journal.Attr](t)(j.GetAttr(ctx, ino)).Size }},
		{"Lookup", func(journal.Ino) uint64 { return must[journal.Attr](t)(j.Lookup(ctx, journal.RootIno, "f")).Size }},
		{"LookupAll", func(journal.Ino) uint64 {
			attrs, errs, err := j.LookupAll(ctx, journal.RootIno, []string{"g", "f"})
			if err != nil || errs[1] != nil {
				t.Fatal(err, errs)
			}
			return attrs[1].Size
		}},
		{"Read", func(ino journal.Ino) uint64 {
			p := make([]byte, 1<<16)
			return uint64(must[int](t)(j.Read(ctx, ino, p, 0)))
		}},
		{"Lseek", func(ino journal.Ino) uint64 {
			return uint64(must[int64](t)(j.Lseek(ctx, ino, 0, journal.SeekHole)))
		}},
		{"Link", func(ino journal.Ino) uint64 {
			a := must[journal.Attr](t)(j.Link(ctx, journal.Root, ino, journal.RootIno, "link"))
			if err := j.Unlink(ctx, journal.Root, journal.RootIno, "link"); err != nil {
				t.Fatal(err)
			}
			return a.Size
		}},
		{"SetAttr", func(ino journal.Ino) uint64 {
			return must[journal.Attr](t)(j.SetAttr(ctx, journal.Root, ino, journal.SetAttrIn{Valid: journal.SetMode, Mode: 0o644})).Size
		}},
		{"Status", func(journal.Ino) uint64 { return must[journal.Status](t)(j.Status(ctx)).Bytes }},
	}
	a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
	if _, err := j.Create(ctx, journal.Root, journal.RootIno, "g", 0o644); err != nil {
		t.Fatal(err)
	}
	h := must[*journal.Handle](t)(j.Open(ctx, journal.Root, a.Ino, true, true))
	defer j.Release(ctx, h)
	size := int64(0)
	for i, op := range ops {
		// The kernel writes through the backing file: the journal hears
		// nothing of it.
		more := bytes.Repeat([]byte{byte('a' + i)}, 100+i)
		if _, err := h.Backing().WriteAt(more, size); err != nil {
			t.Fatal(err)
		}
		size += int64(len(more))
		if got := op.size(a.Ino); got != uint64(size) {
			t.Errorf("%s after a passthrough write: size %d, want %d", op.name, got, size)
		}
	}
	// A truncate after passthrough writes cuts from the adopted size.
	if _, err := h.Backing().WriteAt([]byte("tail"), size); err != nil {
		t.Fatal(err)
	}
	if at := must[journal.Attr](t)(j.SetAttr(ctx, journal.Root, a.Ino, journal.SetAttrIn{Valid: journal.SetSize, Size: uint64(size + 2)})); at.Size != uint64(size+2) {
		t.Fatalf("truncate after a passthrough write: size %d, want %d", at.Size, size+2)
	}
	if got := readAll(t, j, a.Ino); len(got) != int(size+2) || string(got[size:]) != "ta" {
		t.Fatalf("after truncate: %d bytes, tail %q", len(got), got[max(0, len(got)-4):])
	}
}

// CreateOpen makes and opens a file at once: with a backing file for a
// plain writer (the kernel's writes to it are the file's bytes, adopted
// per operation and at release), without one where Open would give none,
// and not at all for a name that exists.
func TestHandle_CreateOpen(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	j := e.openUnmanaged(dir)
	t.Cleanup(func() { j.Close() })

	t.Run("Writer", func(t *testing.T) {
		a, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "w", 0o640, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if a.Size != 0 || a.Mode != 0o640 || a.Type != journal.TypeRegular || a.Nlink != 1 {
			t.Fatalf("attributes of the new file: %+v", a)
		}
		if look := must[journal.Attr](t)(j.Lookup(ctx, journal.RootIno, "w")); look.Ino != a.Ino {
			t.Fatalf("lookup: inode %d, created %d", look.Ino, a.Ino)
		}
		bf := h.Backing()
		if bf == nil {
			t.Fatal("no backing file for a plain writer")
		}
		if got, err := readFile(bf); err != nil || len(got) != 0 {
			t.Fatalf("backing file of a new file: %q, %v", got, err)
		}
		// Nothing written: the size and times stay what Create said.
		if got := must[journal.Attr](t)(j.GetAttr(ctx, a.Ino)); got != a {
			t.Fatalf("attributes before any write:\n got %+v\nwant %+v", got, a)
		}
		if _, err := bf.WriteAt([]byte("hello"), 0); err != nil {
			t.Fatal(err)
		}
		if got := must[journal.Attr](t)(j.GetAttr(ctx, a.Ino)); got.Size != 5 {
			t.Fatalf("size after a passthrough write: %d, want 5", got.Size)
		}
		if _, err := bf.WriteAt([]byte(", world"), 5); err != nil {
			t.Fatal(err)
		}
		if err := j.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, j, a.Ino); string(got) != "hello, world" {
			t.Fatalf("after release: %q", got)
		}
		id := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
		f := e.open("fork-w", e.t.TempDir(), id) // closed when the test ends
		fa := must[journal.Attr](t)(f.Lookup(ctx, journal.RootIno, "w"))
		if got := readAll(t, f, fa.Ino); string(got) != "hello, world" {
			t.Fatalf("in the snapshot: %q", got)
		}
	})

	t.Run("Reader", func(t *testing.T) {
		a, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "r", 0o644, false, true)
		if err != nil {
			t.Fatal(err)
		}
		if h.Backing() == nil {
			t.Fatal("no backing file for a reader")
		}
		if err := j.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, j, a.Ino); len(got) != 0 {
			t.Fatalf("new file reads %q", got)
		}
	})

	t.Run("NoBacking", func(t *testing.T) {
		for _, c := range []struct {
			name    string
			mode    uint32
			backing bool
		}{
			{"setuid", 0o4755, true},
			{"setgid-exec", 0o2750, true},
			{"not-asked", 0o644, false},
		} {
			a, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, c.name, c.mode, true, c.backing)
			if err != nil {
				t.Fatal(err)
			}
			if h.Backing() != nil {
				t.Fatalf("%s: got a backing file", c.name)
			}
			if _, err := j.Write(ctx, journal.Root, a.Ino, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			if err := j.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, j, a.Ino); string(got) != "x" {
				t.Fatalf("%s: %q", c.name, got)
			}
		}
	})

	t.Run("Exists", func(t *testing.T) {
		before := must[journal.Status](t)(j.Status(ctx))
		if _, _, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "w", 0o644, true, true); !errors.Is(err, journal.ErrExists) {
			t.Fatalf("create over an existing name: %v, want ErrExists", err)
		}
		after := must[journal.Status](t)(j.Status(ctx))
		if after.Inodes != before.Inodes || after.OpenFiles != before.OpenFiles {
			t.Fatalf("a failed create changed the counts: %+v -> %+v", before, after)
		}
		// The inode number the failed create tried is used by the next.
		a, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "next", 0o644, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := readFile(h.Backing()); err != nil || len(got) != 0 {
			t.Fatalf("backing file after a failed create: %q, %v", got, err)
		}
		if err := j.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, j, a.Ino); len(got) != 0 {
			t.Fatalf("new file reads %q", got)
		}
	})

	t.Run("Leftover", func(t *testing.T) {
		// A staging file a crash left for the next inode number (made,
		// then killed before the transaction) is cut, never adopted.
		a, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "probe", 0o644, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		left := filepath.Join(dir, "staging", "1", fmtAny(uint64(a.Ino)+1))
		if _, err := os.Stat(filepath.Dir(left)); err != nil {
			t.Fatalf("the staging directory is not where this test expects it: %v", err)
		}
		if err := os.WriteFile(left, []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		b, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "fresh", 0o644, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if b.Ino != a.Ino+1 {
			t.Fatalf("new inode %d, want %d", b.Ino, a.Ino+1)
		}
		if fi, err := os.Stat(left); err != nil || fi.Size() != 0 {
			t.Fatalf("leftover staging file after the create: %v, %v", fi, err)
		}
		if got := must[journal.Attr](t)(j.GetAttr(ctx, b.Ino)); got.Size != 0 {
			t.Fatalf("size %d, want 0", got.Size)
		}
		if _, err := h.Backing().WriteAt([]byte("ab"), 0); err != nil {
			t.Fatal(err)
		}
		if err := j.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, j, b.Ino); string(got) != "ab" {
			t.Fatalf("after release: %q", got)
		}
	})

	t.Run("MissingStagingFile", func(t *testing.T) {
		// An empty staged file whose staging file is missing (a crash
		// between a truncate's record and its staging file) opens.
		a, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "gone", 0o644, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		j.Close()
		if err := os.Remove(filepath.Join(dir, "staging", "1", fmtAny(uint64(a.Ino)))); err != nil {
			t.Fatal(err)
		}
		j = e.openUnmanaged(dir)
		for _, write := range []bool{false, true} {
			h, err := j.Open(ctx, journal.Root, a.Ino, write, true)
			if err != nil {
				t.Fatalf("open (write %v): %v", write, err)
			}
			if h.Backing() == nil {
				t.Fatalf("open (write %v): no backing file", write)
			}
			if err := j.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		if got := readAll(t, j, a.Ino); len(got) != 0 {
			t.Fatalf("reads %q", got)
		}
	})

	t.Run("Reopen", func(t *testing.T) {
		// Closed while open for writing (as a crash would leave it): the
		// next Open takes what was written to the backing file.
		a, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "open", 0o644, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Backing().WriteAt([]byte("kept"), 0); err != nil {
			t.Fatal(err)
		}
		j.Close()
		h.Backing().Close()
		j = e.openUnmanaged(dir)
		if got := readAll(t, j, a.Ino); string(got) != "kept" {
			t.Fatalf("after reopen: %q", got)
		}
	})
}
