package journal_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"
)

// GetXattr of an inode known to have no xattrs is answered without the
// journal's lock, with the errors the locked path gives.
func TestXattr_NoneAnswers(t *testing.T) {
	e := newEnv(t)
	j := e.openUnmanaged(t.TempDir())
	a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
	d := must[journal.Attr](t)(j.Mkdir(ctx, journal.Root, journal.RootIno, "d", 0o755))
	s := must[journal.Attr](t)(j.Symlink(ctx, journal.Root, journal.RootIno, "s", "f"))
	for _, c := range []struct {
		ino  journal.Ino
		name string
		want error
	}{
		{a.Ino, "security.capability", journal.ErrNoData},
		{a.Ino, "user.x", journal.ErrNoData},
		{a.Ino, "trusted.x", journal.ErrNoData},
		{d.Ino, "user.x", journal.ErrNoData},
		{s.Ino, "user.x", journal.ErrNoData},
		{a.Ino, "user.", journal.ErrInvalid},
		{a.Ino, "os2.x", journal.ErrNotSupported},
		{a.Ino, "", journal.ErrRange},
		{a.Ino, "user." + strings.Repeat("x", journal.XattrNameMax), journal.ErrRange},
		{a.Ino + 100, "user.x", journal.ErrNotFound},
	} {
		for range 2 { // the first may take the locked path, the second not
			if _, err := j.GetXattr(ctx, c.ino, c.name); !errors.Is(err, c.want) {
				t.Fatalf("GetXattr(%d, %.20q): %v, want %v", c.ino, c.name, err, c.want)
			}
		}
	}
	if err := j.Unlink(ctx, journal.Root, journal.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.GetXattr(ctx, a.Ino, "user.x"); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("GetXattr of a deleted inode: %v, want ErrNotFound", err)
	}
	j.Close()
	if _, err := j.GetXattr(ctx, d.Ino, "user.x"); !errors.Is(err, journal.ErrClosed) {
		t.Fatalf("GetXattr after Close: %v, want ErrClosed", err)
	}
}

// A GetXattr that starts after SetXattr returned sees the value, from any
// goroutine, while others keep asking the same inodes (run with -race).
func TestXattr_SetThenGetNeverMisses(t *testing.T) {
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	const files = 200
	inos := make([]journal.Ino, files)
	for i := range inos {
		a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, fmt.Sprint("f", i), 0o644))
		inos[i] = a.Ino
		if _, err := j.GetXattr(ctx, a.Ino, "user.k"); !errors.Is(err, journal.ErrNoData) {
			t.Fatalf("new file: %v", err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 { // askers: the inodes are asked for all along
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := j.GetXattr(ctx, inos[k%files], "user.k"); err != nil && !errors.Is(err, journal.ErrNoData) {
					t.Errorf("asker: %v", err)
					return
				}
			}
		})
	}
	set := make(chan int)
	checked := make(chan error)
	go func() { // the checker: another goroutine than the setter
		for i := range set {
			v, err := j.GetXattr(ctx, inos[i], "user.k")
			if err == nil && !bytes.Equal(v, []byte(fmt.Sprint("v", i))) {
				err = fmt.Errorf("value %q", v)
			}
			if err != nil {
				err = fmt.Errorf("file %d, right after its SetXattr returned: %w", i, err)
			}
			checked <- err
		}
	}()
	for i := range files {
		if err := j.SetXattr(ctx, journal.Root, inos[i], "user.k", []byte(fmt.Sprint("v", i)), 0); err != nil {
			t.Fatal(err)
		}
		set <- i
		if err := <-checked; err != nil {
			t.Fatal(err)
		}
	}
	close(set)
	close(stop)
	wg.Wait()
}

// Inode numbers come from the snapshot a rollback goes to: what was known
// of an inode's xattrs before does not survive it.
func TestXattr_NoneAcrossRollback(t *testing.T) {
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	a := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
	without := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	if err := j.SetXattr(ctx, journal.Root, a.Ino, "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	with := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	must[chunkstore.ID](t)(j.Rollback(ctx, without, false))
	b := must[journal.Attr](t)(j.Lookup(ctx, journal.RootIno, "f"))
	if b.Ino != a.Ino {
		t.Fatalf("inode %d after the rollback, %d before: this test needs them equal", b.Ino, a.Ino)
	}
	for range 2 {
		if _, err := j.GetXattr(ctx, b.Ino, "user.k"); !errors.Is(err, journal.ErrNoData) {
			t.Fatalf("after a rollback to before the xattr: %v", err)
		}
	}
	must[chunkstore.ID](t)(j.Rollback(ctx, with, false))
	// Asked by number before any lookup, as the kernel may: the inode has
	// the xattr now (or is not known until its directory is loaded).
	if _, err := j.GetXattr(ctx, a.Ino, "user.k"); errors.Is(err, journal.ErrNoData) {
		t.Fatalf("after a rollback to the xattr, before a lookup: %v", err)
	}
	c := must[journal.Attr](t)(j.Lookup(ctx, journal.RootIno, "f"))
	if v, err := j.GetXattr(ctx, c.Ino, "user.k"); err != nil || string(v) != "v" {
		t.Fatalf("after a rollback to the xattr: %q, %v", v, err)
	}
}
