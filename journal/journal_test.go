package journal_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/journal"
)

var ctx = context.Background()

// clock is a deterministic clock: every call advances it by 1 µs.
type clock struct{ t int64 }

func (c *clock) now() int64 { c.t += 1000; return c.t }

type env struct {
	t     *testing.T
	store *chunkstore.Store
	clk   *clock
}

func newEnv(t *testing.T) *env {
	return &env{t: t, store: chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{}), clk: &clock{t: 1_700_000_000_000_000_000}}
}

func (e *env) open(ws, dir string, from chunkstore.ID) *journal.Journal {
	e.t.Helper()
	j, err := journal.Open(ctx, journal.Config{Dir: dir, Store: e.store, Workspace: ws, From: from, Clock: e.clk.now})
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.t.Cleanup(func() { j.Close() })
	return j
}

// openUnmanaged opens workspace "ws" in dir without closing it at the end:
// the test closes it itself, to reopen (or to stand for a crash).
func (e *env) openUnmanaged(dir string) *journal.Journal {
	e.t.Helper()
	j, err := journal.Open(ctx, journal.Config{Dir: dir, Store: e.store, Workspace: "ws", Clock: e.clk.now})
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	return j
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func readAll(t *testing.T, j *journal.Journal, ino journal.Ino) []byte {
	t.Helper()
	a := must[journal.Attr](t)(j.GetAttr(ctx, ino))
	buf := make([]byte, a.Size)
	n, err := j.Read(ctx, ino, buf, 0)
	if err != nil || n != len(buf) {
		t.Fatalf("Read(%d): %d of %d bytes, %v", ino, n, len(buf), err)
	}
	return buf
}

// tree walks a journal into a comparable description.
func tree(t *testing.T, j *journal.Journal) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(ino journal.Ino, path string)
	walk = func(ino journal.Ino, path string) {
		a := must[journal.Attr](t)(j.GetAttr(ctx, ino))
		desc := formatAttr(a)
		switch a.Type {
		case journal.TypeRegular:
			desc += " data=" + string(readAll(t, j, ino))
		case journal.TypeSymlink:
			desc += " -> " + must[string](t)(j.Readlink(ctx, ino))
		}
		xs := must[[]string](t)(j.ListXattr(ctx, ino))
		for _, x := range xs {
			desc += " " + x + "=" + string(must[[]byte](t)(j.GetXattr(ctx, ino, x)))
		}
		out[path] = desc
		if a.Type == journal.TypeDir {
			for _, e := range must[[]journal.DirEntry](t)(j.ReadDir(ctx, ino)) {
				walk(e.Ino, path+"/"+e.Name)
			}
		}
	}
	walk(journal.RootIno, "")
	return out
}

func formatAttr(a journal.Attr) string {
	return fmtAttr(a.Ino, a.Type, a.Mode, a.UID, a.GID, a.Size, a.Nlink, a.Rdev, a.Atime, a.Mtime, a.Ctime)
}

func fmtAttr(v ...any) string {
	var b bytes.Buffer
	for _, x := range v {
		b.WriteString(" ")
		b.WriteString(fmtAny(x))
	}
	return b.String()
}

func TestJournal_SnapshotAndFork(t *testing.T) {
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	root := journal.RootIno
	c := journal.Caller{UID: 1000, GID: 1000}
	d := must[journal.Attr](t)(j.Mkdir(ctx, c, root, "src", 0o755))
	f := must[journal.Attr](t)(j.Create(ctx, c, d.Ino, "main.go", 0o644))
	if _, err := j.Write(ctx, c, f.Ino, []byte("package main\n"), 0); err != nil {
		t.Fatal(err)
	}
	big := must[journal.Attr](t)(j.Create(ctx, c, root, "big.bin", 0o600))
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if _, err := j.Write(ctx, c, big.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	must[journal.Attr](t)(j.Symlink(ctx, c, root, "link", "src/main.go"))
	must[journal.Attr](t)(j.Link(ctx, c, f.Ino, root, "hard.go"))
	must[journal.Attr](t)(j.Mknod(ctx, journal.Root, root, "fifo", journal.TypeFIFO, 0o644, 0))
	if err := j.SetXattr(ctx, c, f.Ino, "user.note", []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := j.SetXattr(ctx, c, root, "user.rootnote", []byte("r"), 0); err != nil {
		t.Fatal(err)
	}
	before := tree(t, j)
	snap, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if got := tree(t, j); !equalMaps(got, before) {
		t.Fatalf("snapshot changed the live tree")
	}
	rec, err := e.store.Snapshot(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != 1 || len(rec.Parents) != 0 || rec.Stats.Files != 2 || rec.Stats.Dirs != 2 || len(rec.Changes) == 0 {
		t.Errorf("record: seq %d parents %d stats %+v changes %d", rec.Seq, len(rec.Parents), rec.Stats, len(rec.Changes))
	}
	// Resume elsewhere: a fresh journal directory on the same store.
	j2 := e.open("ws", t.TempDir(), chunkstore.ID{})
	if got := tree(t, j2); !equalMaps(got, before) {
		diffMaps(t, before, got)
		t.Fatalf("resumed tree differs")
	}
	// Fork.
	j3 := e.open("fork", t.TempDir(), snap)
	if got := tree(t, j3); !equalMaps(got, before) {
		diffMaps(t, before, got)
		t.Fatalf("forked tree differs")
	}
	// A new inode in the fork gets a number above every inode of the snapshot.
	n := must[journal.Attr](t)(j3.Create(ctx, c, root, "new", 0o644))
	for _, a := range []journal.Ino{d.Ino, f.Ino, big.Ino} {
		if n.Ino <= a {
			t.Fatalf("new inode %d collides with the snapshot's inode %d", n.Ino, a)
		}
	}
	// A second snapshot after a small change.
	if _, err := j.Write(ctx, c, f.Ino, []byte("// x\n"), 13); err != nil {
		t.Fatal(err)
	}
	snap2, err := j.Snapshot(ctx, journal.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec2, _ := e.store.Snapshot(ctx, snap2)
	if rec2.Seq != 2 || rec2.Parents[0] != snap || rec2.Stats.ChangedFiles != 1 {
		t.Errorf("second record: seq %d parents %v changed %d changes %+v", rec2.Seq, rec2.Parents, rec2.Stats.ChangedFiles, rec2.Changes)
	}
	// Rollback to the first.
	discarded, err := j.Rollback(ctx, snap, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := tree(t, j); !equalMaps(got, before) {
		diffMaps(t, before, got)
		t.Fatalf("rolled-back tree differs")
	}
	if discarded.IsZero() {
		t.Fatal("no discarded snapshot")
	}
	if _, err := j.Lookup(ctx, root, "nope"); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("Lookup of a missing name: %v", err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func diffMaps(t *testing.T, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s:\n want %s\n  got %s", k, v, got[k])
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s", k, v)
		}
	}
}

// A kill during Badger's start-up can leave an empty value-log file that
// Badger itself cannot reopen; Open repairs it.
func TestJournal_ReopenAfterEmptyVlog(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	j := e.openUnmanaged(dir)
	a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "kept", 0o644))
	j.Close()
	// What a kill between creating and initialising the next value log leaves.
	if err := os.WriteFile(filepath.Join(dir, "meta", "000999.vlog"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	j2 := e.open("ws", dir, chunkstore.ID{})
	if got, err := j2.Lookup(ctx, journal.RootIno, "kept"); err != nil || got.Ino != a.Ino {
		t.Fatalf("after repair: Lookup = %+v, %v", got, err)
	}
}

// A write killed after its pwrite but before its record leaves bytes past
// the end of a staging file. If a snapshot commits the file clean in
// between, the next growth must still cut them: a file grown by truncate
// reads zeros there, in reads and in the next snapshot. (Found by the crash
// test: the first write after a commit took a kept staging file for a
// fresh copy-up.)
func TestJournal_GrowAfterCommitCutsStaleTail(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	j := e.openUnmanaged(dir)
	a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
	head := bytes.Repeat([]byte("h"), 6000)
	if _, err := j.Write(ctx, journal.Root, a.Ino, head, 0); err != nil {
		t.Fatal(err)
	}
	j.Close()
	staged, err := filepath.Glob(filepath.Join(dir, "staging", "*", fmtAny(a.Ino)))
	if err != nil || len(staged) != 1 {
		t.Fatalf("staging file of inode %d: %v, %v", a.Ino, staged, err)
	}
	// What the killed write left: bytes past Size, no record of them.
	f, err := os.OpenFile(staged[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("X"), 4000), int64(len(head))); err != nil {
		t.Fatal(err)
	}
	f.Close()

	j = e.open("ws", dir, chunkstore.ID{})
	if _, err := j.Snapshot(ctx, journal.SnapshotOptions{}); err != nil { // the file is clean now
		t.Fatal(err)
	}
	const size = 9000
	if _, err := j.SetAttr(ctx, journal.Root, a.Ino, journal.SetAttrIn{Valid: journal.SetSize, Size: size}); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(head), make([]byte, size-len(head))...)
	if got := readAll(t, j, a.Ino); !bytes.Equal(got, want) {
		t.Fatalf("after growing to %d: bytes %d.. are %q, want zeros", size, len(head), got[len(head):len(head)+16])
	}
	id := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	j2 := e.open("other", t.TempDir(), id)
	b := must[journal.Attr](t)(j2.Lookup(ctx, journal.RootIno, "f"))
	if got := readAll(t, j2, b.Ino); !bytes.Equal(got, want) {
		t.Fatalf("snapshot holds bytes %q past the old end, want zeros", got[len(head):len(head)+16])
	}
}

// A sparse file keeps its holes through snapshot, fork and copy-up: a
// file of 1 TiB with a few KiB of data stores a few KiB, lseek finds its
// data in the staging file and in the chunk list alike, and a fork reads
// the same bytes.
func TestJournal_SparseFileSnapshot(t *testing.T) {
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "sparse", 0o644))
	const size = 1 << 40
	const mid = 1 << 30
	for _, off := range []int64{mid, size - 5} {
		if _, err := j.Write(ctx, journal.Root, a.Ino, []byte("data!"), off); err != nil {
			t.Fatal(err)
		}
	}
	checkSeek := func(j *journal.Journal, ino journal.Ino, where string) {
		t.Helper()
		for _, c := range []struct {
			off    int64
			whence int
			want   int64
		}{{0, journal.SeekData, mid}, {0, journal.SeekHole, 0}, {mid, journal.SeekHole, mid + 4096}, {mid + 4096, journal.SeekData, size - 4096}} {
			got, err := j.Lseek(ctx, ino, c.off, c.whence)
			// Data is found at block (staging file) or chunk granularity.
			if err != nil || got > c.want || c.whence == journal.SeekData && got < c.want-64<<10 || c.whence == journal.SeekHole && got < c.off {
				t.Fatalf("%s: Lseek(%d, %d) = %d, %v; want about %d", where, c.off, c.whence, got, err, c.want)
			}
		}
	}
	checkSeek(j, a.Ino, "staged")
	before := e.store.Stats()
	id := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	if grown := e.store.Stats().NewRawBytes - before.NewRawBytes; grown > 1<<20 {
		t.Fatalf("a snapshot of a sparse 1 TiB file stored %d raw bytes", grown)
	}
	j2 := e.open("fork", t.TempDir(), id)
	b := must[journal.Attr](t)(j2.Lookup(ctx, journal.RootIno, "sparse"))
	if b.Size != size {
		t.Fatalf("fork: size %d, want %d", b.Size, size)
	}
	checkSeek(j2, b.Ino, "stored")
	buf := make([]byte, 9)
	for _, off := range []int64{mid - 2, size - 7} {
		if n, err := j2.Read(ctx, b.Ino, buf, off); err != nil || string(buf[:n]) != "\x00\x00data!\x00\x00"[:n] {
			t.Fatalf("fork: read at %d: %q, %v", off, buf[:n], err)
		}
	}
	// Copy-up of the clean sparse file writes only its data.
	if _, err := j2.Write(ctx, journal.Root, b.Ino, []byte("X"), 0); err != nil {
		t.Fatal(err)
	}
	if n, err := j2.Read(ctx, b.Ino, buf, mid); err != nil || string(buf[:5]) != "data!" {
		t.Fatalf("after copy-up: read %q, %v", buf[:n], err)
	}
}
