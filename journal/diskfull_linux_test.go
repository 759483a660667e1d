package journal_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/journal"

	"github.com/cairnfs/cairn/internal/testenv"
)

// diskSize is the small disk the full-disk tests fill: room for the
// journal's guard (about 100 MiB with the default Badger options) and some.
const diskSize = "256m"

// A journal on a really full disk fails writes with ErrNoSpace, stays
// consistent, and works again once space is freed.
func TestFault_DiskFull(t *testing.T) {
	dir := testenv.SmallDisk(t, diskSize)
	e := newEnv(t)
	j := e.open("ws", dir+"/journal", chunkstore.ID{})
	f := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "fill", 0o644))
	chunk := bytes.Repeat([]byte{7}, 1<<20)
	var err error
	var off int64
	for off = 0; off < 400<<20; off += int64(len(chunk)) {
		if _, err = j.Write(ctx, journal.Root, f.Ino, chunk, off); err != nil {
			break
		}
	}
	if !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("filling a %s disk: err = %v after %d MiB, want ErrNoSpace", diskSize, err, off>>20)
	}
	a := must[journal.Attr](t)(j.GetAttr(ctx, f.Ino))
	if int64(a.Size) != off {
		t.Fatalf("size %d after the failed write at %d", a.Size, off)
	}
	if err := j.Unlink(ctx, journal.Root, journal.RootIno, "fill"); err != nil {
		t.Fatalf("unlink on a full disk: %v", err)
	}
	g := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "after", 0o644))
	if _, err := j.Write(ctx, journal.Root, g.Ino, []byte("fine"), 0); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	j.Close()
	j2 := e.open("ws", dir+"/journal", chunkstore.ID{})
	if got := readAll(t, j2, must[journal.Attr](t)(j2.Lookup(ctx, journal.RootIno, "after")).Ino); string(got) != "fine" {
		t.Fatalf("after reopen: %q", got)
	}
}

// fillDisk writes a file in dir until the disk is full, as a program
// beside the journal (or a writer through FUSE passthrough, which the
// journal does not see) would. It returns the file's path.
func fillDisk(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{9}, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	small := chunk[:4096]
	for {
		if _, err := f.Write(small); err != nil {
			break
		}
	}
	return path
}

// A disk filled behind the journal's back (by another program, or through
// FUSE passthrough) must not kill the process: Badger writes its memtable
// log and tables through mmap'd sparse files, and a page it cannot get is
// SIGBUS. Metadata writes fail with ErrNoSpace, reads work, removing works,
// a snapshot is refused, close and reopen work on the full disk, and
// freeing space makes writes and snapshots work again.
func TestFault_DiskFilledOutside(t *testing.T) {
	dir := testenv.SmallDisk(t, diskSize)
	e := newEnv(t)
	jdir := dir + "/journal"
	j := e.open("ws", jdir, chunkstore.ID{})
	keep := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "keep", 0o644))
	must[int](t)(j.Write(ctx, journal.Root, keep.Ino, []byte("kept bytes"), 0))
	doomed := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "doomed", 0o644))
	must[int](t)(j.Write(ctx, journal.Root, doomed.Ino, bytes.Repeat([]byte{1}, 1<<20), 0))
	filler := fillDisk(t, dir, "filler")

	// Thousands of metadata writes on the full disk: each is refused, none
	// reaches a page of Badger's that has no block.
	big := bytes.Repeat([]byte{3}, journal.XattrSizeMax)
	for i := range 2000 {
		_, err := j.Create(ctx, journal.Root, journal.RootIno, fmt.Sprintf("new%d", i), 0o644)
		if !errors.Is(err, journal.ErrNoSpace) {
			t.Fatalf("create %d on a full disk: %v, want ErrNoSpace", i, err)
		}
		if err := j.SetXattr(ctx, journal.Root, keep.Ino, "user.big", big, 0); !errors.Is(err, journal.ErrNoSpace) {
			t.Fatalf("setxattr %d on a full disk: %v, want ErrNoSpace", i, err)
		}
	}
	if _, err := j.Write(ctx, journal.Root, keep.Ino, []byte("more"), 10); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("write on a full disk: %v, want ErrNoSpace", err)
	}
	if got := readAll(t, j, keep.Ino); string(got) != "kept bytes" {
		t.Fatalf("read on a full disk: %q", got)
	}
	if _, err := j.ReadDir(ctx, journal.RootIno); err != nil {
		t.Fatalf("readdir on a full disk: %v", err)
	}
	// Removing works (it may use the reserve). A snapshot, which writes
	// packs (usually to the journal's disk), is refused before it starts.
	if err := j.Unlink(ctx, journal.Root, journal.RootIno, "doomed"); err != nil {
		t.Fatalf("unlink on a full disk: %v", err)
	}
	if _, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: "on a full disk"}); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("snapshot on a full disk: %v, want ErrNoSpace", err)
	}
	// The journal closes and opens on the full disk, with what it had.
	if err := j.Close(); err != nil {
		t.Fatalf("close on a full disk: %v", err)
	}
	j = e.open("ws", jdir, chunkstore.ID{})
	if got := readAll(t, j, must[journal.Attr](t)(j.Lookup(ctx, journal.RootIno, "keep")).Ino); string(got) != "kept bytes" {
		t.Fatalf("after reopening on a full disk: %q", got)
	}
	if _, err := j.Lookup(ctx, journal.RootIno, "doomed"); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("doomed after reopen: %v", err)
	}
	if _, err := j.Create(ctx, journal.Root, journal.RootIno, "still-full", 0o644); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("create after reopening on a full disk: %v, want ErrNoSpace", err)
	}

	// With not one block left and the reserve spent, the journal does not
	// open: it says so, and opens once there is room.
	if err := j.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	last := fillDisk(t, dir, "last")
	_, err := journal.Open(ctx, journal.Config{Dir: jdir, Store: e.store, Workspace: "ws"})
	if !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("open on a disk without a free block: %v, want ErrNoSpace", err)
	}
	t.Logf("open on a full disk: %v", err)
	if err := os.Remove(last); err != nil {
		t.Fatal(err)
	}
	j = e.open("ws", jdir, chunkstore.ID{})

	// Space comes back: writes work again, and last.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	g := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "after", 0o644))
	must[int](t)(j.Write(ctx, journal.Root, g.Ino, []byte("fine"), 0))
	must[int](t)(j.Write(ctx, journal.Root, keep.Ino, []byte(" and more"), 10))
	snap := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{Message: "after"}))
	j.Close()
	j = e.open("ws", jdir, chunkstore.ID{})
	if got := readAll(t, j, must[journal.Attr](t)(j.Lookup(ctx, journal.RootIno, "keep")).Ino); string(got) != "kept bytes and more" {
		t.Fatalf("after freeing space and reopening: %q", got)
	}
	if got := readAll(t, j, must[journal.Attr](t)(j.Lookup(ctx, journal.RootIno, "after")).Ino); string(got) != "fine" {
		t.Fatalf("after freeing space and reopening: %q", got)
	}
	if st := must[journal.Status](t)(j.Status(ctx)); st.Base != snap || st.DirtyInodes != 0 {
		t.Fatalf("after reopening: base %s with %d dirty inodes, want the snapshot %s, clean", st.Base.Short(), st.DirtyInodes, snap.Short())
	}
}

// Metadata alone fills the disk (big xattrs go into Badger's memtable log
// and tables, through its flushes and compactions): the journal refuses
// with ErrNoSpace before Badger runs out of blocks, and what was written
// before survives a reopen.
func TestFault_DiskFullOfMetadata(t *testing.T) {
	dir := testenv.SmallDisk(t, diskSize)
	e := newEnv(t)
	jdir := dir + "/journal"
	j := e.open("ws", jdir, chunkstore.ID{})
	val := make([]byte, journal.XattrSizeMax)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(val) // incompressible: Badger's tables compress
	var err error
	var n int
	for n = 0; n < 20000; n++ {
		var a journal.Attr
		if a, err = j.Create(ctx, journal.Root, journal.RootIno, fmt.Sprintf("f%d", n), 0o644); err != nil {
			break
		}
		if err = j.SetXattr(ctx, journal.Root, a.Ino, "user.v", val, 0); err != nil {
			break
		}
	}
	if !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("after %d files with 64 KiB xattrs: %v, want ErrNoSpace", n, err)
	}
	if n < 100 {
		t.Fatalf("only %d files with xattrs before ErrNoSpace on a %s disk", n, diskSize)
	}
	t.Logf("ErrNoSpace after %d files with a 64 KiB xattr: %v", n, err)
	if err := j.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	j = e.open("ws", jdir, chunkstore.ID{})
	for _, i := range []int{0, n / 2, n - 1} {
		a := must[journal.Attr](t)(j.Lookup(ctx, journal.RootIno, fmt.Sprintf("f%d", i)))
		if got := must[[]byte](t)(j.GetXattr(ctx, a.Ino, "user.v")); !bytes.Equal(got, val) {
			t.Fatalf("xattr of f%d after reopen: %d bytes", i, len(got))
		}
	}
	// Removing files frees the space again.
	for i := range n {
		if err := j.Unlink(ctx, journal.Root, journal.RootIno, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatalf("unlink f%d: %v", i, err)
		}
	}
}

// The disk fills up during a snapshot (its packs go to a local store on
// the journal's disk): once the snapshot is in the store, the journal
// records it from its reserve, so the snapshot is done and the journal
// clean, not "done, but recording it in the journal failed".
func TestFault_DiskFullDuringSnapshot(t *testing.T) {
	dir := testenv.SmallDisk(t, diskSize)
	be, err := local.Open(filepath.Join(dir, "store"), local.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	store := chunkstoretest.NewStore(t, be, chunkstore.InitOptions{}, chunkstore.Options{})
	var logs bytes.Buffer
	j, err := journal.Open(ctx, journal.Config{Dir: dir + "/journal", Store: store, Workspace: "ws",
		Logf: func(format string, args ...any) { fmt.Fprintf(&logs, format+"\n", args...) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	// A file whose staging copy and packs (incompressible: as large) fit
	// on the disk, but leave it below what Badger needs.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	size := (free/2 - 8<<20) &^ (1<<20 - 1)
	if size < 64<<20 {
		t.Fatalf("only %d MiB free on the %s disk", free>>20, diskSize)
	}
	f := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "big", 0o644))
	data := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{2})
	for off := int64(0); off < size; off += int64(len(data)) {
		rng.Read(data)
		if _, err := j.Write(ctx, journal.Root, f.Ino, data, off); err != nil {
			t.Fatalf("write at %d MiB of %d: %v", off>>20, size>>20, err)
		}
	}
	id, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: "fills the disk"})
	if err != nil {
		t.Fatalf("snapshot: %v\nlog:\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "released the journal's reserve") {
		t.Fatalf("the snapshot did not need the reserve (the test's sizes are off); log:\n%s", logs.String())
	}
	if st := must[journal.Status](t)(j.Status(ctx)); st.Base != id || st.DirtyInodes != 0 {
		t.Fatalf("after the snapshot: base %s with %d dirty inodes, want %s, clean", st.Base.Short(), st.DirtyInodes, id.Short())
	}
	// Ordinary writes wait for space to come back.
	if _, err := j.Create(ctx, journal.Root, journal.RootIno, "more", 0o644); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("create after the disk filled: %v, want ErrNoSpace", err)
	}
}

// Opening a stored file for writing on a full disk (a copy-up) fails with
// ErrNoSpace, not EIO, and leaves no staging file; the file still reads,
// and opens for writing once there is room.
func TestFault_DiskFullCopyUp(t *testing.T) {
	dir := testenv.SmallDisk(t, diskSize)
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	data := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{4}).Read(data)
	f := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "big", 0o644))
	must[int](t)(j.Write(ctx, journal.Root, f.Ino, data, 0))
	snap := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))

	jdir := dir + "/journal"
	j2 := e.open("fork", jdir, snap)
	big := must[journal.Attr](t)(j2.Lookup(ctx, journal.RootIno, "big"))
	filler := fillDisk(t, dir, "filler")
	if _, err := j2.Open(ctx, journal.Root, big.Ino, true, true); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("open for writing (copy-up) on a full disk: %v, want ErrNoSpace", err)
	}
	if _, err := j2.Write(ctx, journal.Root, big.Ino, []byte("x"), 0); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("write (copy-up) on a full disk: %v, want ErrNoSpace", err)
	}
	staged, _ := filepath.Glob(filepath.Join(jdir, "staging", "*", "*"))
	if len(staged) != 0 {
		t.Fatalf("staging files after a failed copy-up: %v", staged)
	}
	if got := readAll(t, j2, big.Ino); !bytes.Equal(got, data) {
		t.Fatal("the file reads wrong after a failed copy-up")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	h := must[*journal.Handle](t)(j2.Open(ctx, journal.Root, big.Ino, true, true))
	must[int](t)(j2.Write(ctx, journal.Root, big.Ino, []byte("x"), 0))
	if err := j2.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	data[0] = 'x'
	if got := readAll(t, j2, big.Ino); !bytes.Equal(got, data) {
		t.Fatal("the file reads wrong after the copy-up")
	}
}
