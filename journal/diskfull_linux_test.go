package journal_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"

	"github.com/cairnfs/cairn/internal/testenv"
)

// A journal on a really full disk fails writes with ErrNoSpace, stays
// consistent, and works again once space is freed.
func TestFault_DiskFull(t *testing.T) {
	dir := testenv.SmallDisk(t, "48m")
	e := newEnv(t)
	j := e.open("ws", dir+"/journal", chunkstore.ID{})
	f := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "fill", 0o644))
	chunk := bytes.Repeat([]byte{7}, 1<<20)
	var err error
	var off int64
	for off = 0; off < 200<<20; off += int64(len(chunk)) {
		if _, err = j.Write(ctx, journal.Root, f.Ino, chunk, off); err != nil {
			break
		}
	}
	if !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("filling a 48 MiB disk: err = %v after %d MiB, want ErrNoSpace", err, off>>20)
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
