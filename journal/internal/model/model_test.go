package model

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/journal"
)

// The differential tests (linux*_test.go) check the model against Linux;
// these cover what a real filesystem cannot show cheaply: the journal's
// limits, inode numbering, exact timestamps, Clone.

type clock struct{ now int64 }

func (c *clock) read() int64 { return c.now }

func newModel(t *testing.T) (*Model, *clock) {
	t.Helper()
	c := &clock{now: 1000}
	return New(c.read, 100), c
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

func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

func TestModel_New(t *testing.T) {
	m, _ := newModel(t)
	a := must[journal.Attr](t)(m.GetAttr(t.Context(), journal.RootIno))
	want := journal.Attr{Ino: 1, Type: journal.TypeDir, Mode: 0o755, Nlink: 2, Atime: 1000, Mtime: 1000, Ctime: 1000}
	if a != want {
		t.Fatalf("root: got %+v, want %+v", a, want)
	}
}

func TestModel_InodeNumbers(t *testing.T) {
	ctx := t.Context()
	m, _ := newModel(t)
	a := must[journal.Attr](t)(m.Mkdir(ctx, journal.Root, journal.RootIno, "d", 0o755))
	if _, err := m.Create(ctx, journal.Root, journal.RootIno, "d", 0o644); !errors.Is(err, journal.ErrExists) {
		t.Fatal(err)
	}
	b := must[journal.Attr](t)(m.Symlink(ctx, journal.Root, a.Ino, "s", "x"))
	c := must[journal.Attr](t)(m.Mknod(ctx, journal.Root, a.Ino, "p", journal.TypeFIFO, 0o644, 7))
	if got := []journal.Ino{a.Ino, b.Ino, c.Ino}; !slices.Equal(got, []journal.Ino{100, 101, 102}) {
		t.Fatalf("inode numbers %v, want 100, 101, 102 (failed creations take none)", got)
	}
	if c.Rdev != 0 {
		t.Fatalf("a FIFO keeps rdev %d", c.Rdev)
	}
	if got := m.NextIno(); got != 103 {
		t.Fatalf("NextIno = %d", got)
	}
}

func TestModel_Clone(t *testing.T) {
	ctx := t.Context()
	m, _ := newModel(t)
	f := must[journal.Attr](t)(m.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
	must[int](t)(m.Write(ctx, journal.Root, f.Ino, []byte("hello"), 0))
	if err := m.SetXattr(ctx, journal.Root, f.Ino, "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	c := m.Clone()
	must[int](t)(c.Write(ctx, journal.Root, f.Ino, []byte("J"), 0))
	if err := c.SetXattr(ctx, journal.Root, f.Ino, "user.a", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	must[journal.Attr](t)(c.Mkdir(ctx, journal.Root, journal.RootIno, "d", 0o755))
	buf := make([]byte, 5)
	must[int](t)(m.Read(ctx, f.Ino, buf, 0))
	v := must[[]byte](t)(m.GetXattr(ctx, f.Ino, "user.a"))
	ents := must[[]journal.DirEntry](t)(m.ReadDir(ctx, journal.RootIno))
	if string(buf) != "hello" || string(v) != "1" || len(ents) != 1 || m.NextIno() != 101 {
		t.Fatalf("the original changed with its clone: %q %q %v next %d", buf, v, ents, m.NextIno())
	}
}

func TestModel_Times(t *testing.T) {
	ctx := t.Context()
	m, clk := newModel(t)
	clk.now = 2000
	d := must[journal.Attr](t)(m.Mkdir(ctx, journal.Root, journal.RootIno, "d", 0o755))
	root := must[journal.Attr](t)(m.GetAttr(ctx, journal.RootIno))
	if d.Atime != 2000 || d.Mtime != 2000 || d.Ctime != 2000 || root.Mtime != 2000 || root.Ctime != 2000 || root.Atime != 1000 {
		t.Fatalf("mkdir: dir %+v, root %+v", d, root)
	}
	clk.now = 3000
	f := must[journal.Attr](t)(m.Create(ctx, journal.Root, d.Ino, "f", 0o644))
	clk.now = 4000
	must[int](t)(m.Read(ctx, f.Ino, make([]byte, 1), 0))
	must[[]journal.DirEntry](t)(m.ReadDir(ctx, d.Ino))
	if a := must[journal.Attr](t)(m.GetAttr(ctx, f.Ino)); a.Atime != 3000 {
		t.Fatalf("read changed atime: %+v", a)
	}
	if err := m.Rename(ctx, journal.Root, d.Ino, "f", journal.RootIno, "g", 0); err != nil {
		t.Fatal(err)
	}
	a := must[journal.Attr](t)(m.GetAttr(ctx, f.Ino))
	root = must[journal.Attr](t)(m.GetAttr(ctx, journal.RootIno))
	dd := must[journal.Attr](t)(m.GetAttr(ctx, d.Ino))
	if a.Ctime != 4000 || a.Mtime != 3000 || root.Mtime != 4000 || dd.Mtime != 4000 {
		t.Fatalf("rename: file %+v, old parent %+v, new parent %+v", a, dd, root)
	}
	clk.now = 5000
	a = must[journal.Attr](t)(m.SetAttr(ctx, journal.Root, f.Ino, journal.SetAttrIn{
		Valid: journal.SetAtime | journal.SetMtimeNow | journal.SetCtime, Atime: 7, Ctime: 9,
	}))
	if a.Atime != 7 || a.Mtime != 5000 || a.Ctime != 9 {
		t.Fatalf("setattr times: %+v", a)
	}
	clk.now = 6000
	a = must[journal.Attr](t)(m.SetAttr(ctx, journal.Root, f.Ino, journal.SetAttrIn{Valid: journal.SetSize}))
	if a.Mtime != 6000 || a.Ctime != 6000 {
		t.Fatalf("truncate to the same size: %+v", a)
	}
}

func TestModel_Limits(t *testing.T) {
	ctx := t.Context()
	m, _ := newModel(t)
	d := must[journal.Attr](t)(m.Mkdir(ctx, journal.Root, journal.RootIno, "d", 0o755))
	f := must[journal.Attr](t)(m.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))

	t.Run("Names", func(t *testing.T) {
		for name, want := range map[string]error{
			"": journal.ErrNotFound, "a/b": journal.ErrInvalid, "a\x00": journal.ErrInvalid,
			strings.Repeat("n", journal.NameMax+1): journal.ErrNameTooLong, ".": journal.ErrExists, "..": journal.ErrExists,
		} {
			_, err := m.Create(ctx, journal.Root, journal.RootIno, name, 0o644)
			wantErr(t, err, want)
		}
		must[journal.Attr](t)(m.Create(ctx, journal.Root, d.Ino, strings.Repeat("n", journal.NameMax), 0o644))
	})
	t.Run("LinkMax", func(t *testing.T) {
		m := m.Clone()
		m.inodes[f.Ino].attr.Nlink = journal.LinkMax
		_, err := m.Link(ctx, journal.Root, f.Ino, journal.RootIno, "g")
		wantErr(t, err, journal.ErrTooManyLinks)

		full := m.inodes[d.Ino]
		for i := range journal.LinkMax - 2 {
			ino := journal.Ino(1_000_000 + i)
			m.inodes[ino] = &inode{attr: journal.Attr{Ino: ino, Type: journal.TypeDir}, parent: d.Ino, entries: map[string]journal.Ino{}}
			full.entries[fmt.Sprint(i)] = ino
		}
		_, err = m.Mkdir(ctx, journal.Root, d.Ino, "x", 0o755)
		wantErr(t, err, journal.ErrTooManyLinks)
		must[journal.Attr](t)(m.Mkdir(ctx, journal.Root, journal.RootIno, "e", 0o755))
		err = m.Rename(ctx, journal.Root, journal.RootIno, "e", d.Ino, "x", 0)
		wantErr(t, err, journal.ErrTooManyLinks)
		// A directory replacing a directory adds no link.
		if err := m.Rename(ctx, journal.Root, journal.RootIno, "e", d.Ino, "0", 0); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("FileSize", func(t *testing.T) {
		m := m.Clone()
		n := must[int](t)(m.Write(ctx, journal.Root, f.Ino, []byte("ab"), journal.FileSizeMax-1))
		if n != 1 {
			t.Fatalf("write crossing FileSizeMax wrote %d bytes, want 1", n)
		}
		_, err := m.Write(ctx, journal.Root, f.Ino, []byte("a"), journal.FileSizeMax)
		wantErr(t, err, journal.ErrFileTooBig)
		buf := []byte("xyz")
		if n := must[int](t)(m.Read(ctx, f.Ino, buf, journal.FileSizeMax-2)); n != 2 || string(buf[:2]) != "\x00a" {
			t.Fatalf("read at the end of a 16 TiB sparse file: %d %q", n, buf[:n])
		}
		_, err = m.SetAttr(ctx, journal.Root, f.Ino, journal.SetAttrIn{Valid: journal.SetSize, Size: journal.FileSizeMax + 1})
		wantErr(t, err, journal.ErrFileTooBig)
		wantErr(t, m.Fallocate(ctx, journal.Root, f.Ino, 0, journal.FileSizeMax-1, 2), journal.ErrFileTooBig)
		_, err = m.CopyFileRange(ctx, journal.Root, f.Ino, 0, f.Ino, journal.FileSizeMax, 1)
		wantErr(t, err, journal.ErrFileTooBig)
		must[journal.Attr](t)(m.SetAttr(ctx, journal.Root, f.Ino, journal.SetAttrIn{Valid: journal.SetSize, Size: 1}))
		if len(m.inodes[f.Ino].data.pages) != 0 {
			t.Fatalf("truncation kept %d pages", len(m.inodes[f.Ino].data.pages))
		}
	})
	t.Run("Xattrs", func(t *testing.T) {
		m := m.Clone()
		if err := m.SetXattr(ctx, journal.Root, f.Ino, "user.big", make([]byte, journal.XattrSizeMax), 0); err != nil {
			t.Fatal(err)
		}
		wantErr(t, m.SetXattr(ctx, journal.Root, f.Ino, "user.big", make([]byte, journal.XattrSizeMax+1), 0), journal.ErrTooBig)
		name := func(i int) string { return fmt.Sprintf("user.%0250d", i) } // 256 bytes in the list
		for i := range journal.XattrListMax / 256 {
			if i == 0 {
				delete(m.inodes[f.Ino].xattrs, "user.big")
			}
			if err := m.SetXattr(ctx, journal.Root, f.Ino, name(i), nil, 0); err != nil {
				t.Fatal(i, err)
			}
		}
		wantErr(t, m.SetXattr(ctx, journal.Root, f.Ino, "user.x", nil, 0), journal.ErrNoXattrSpace)
		if err := m.SetXattr(ctx, journal.Root, f.Ino, name(0), []byte("replace"), 0); err != nil {
			t.Fatal(err)
		}
		names := must[[]string](t)(m.ListXattr(ctx, f.Ino))
		if !slices.IsSorted(names) || len(names) != journal.XattrListMax/256 {
			t.Fatalf("%d names, sorted %v", len(names), slices.IsSorted(names))
		}
	})
}

func TestModel_Data(t *testing.T) {
	ctx := t.Context()
	m, _ := newModel(t)
	f := must[journal.Attr](t)(m.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
	content := func() string {
		a := must[journal.Attr](t)(m.GetAttr(ctx, f.Ino))
		buf := make([]byte, a.Size)
		must[int](t)(m.Read(ctx, f.Ino, buf, 0))
		return string(bytes.ReplaceAll(buf, []byte{0}, []byte("_")))
	}
	must[int](t)(m.Write(ctx, journal.Root, f.Ino, []byte("abcdef"), 2))
	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"write", func() error { return nil }, "__abcdef"},
		{"zero range", func() error { return m.Fallocate(ctx, journal.Root, f.Ino, journal.FallocZeroRange, 3, 2) }, "__a__def"},
		{"zero range extends", func() error { return m.Fallocate(ctx, journal.Root, f.Ino, journal.FallocZeroRange, 7, 3) }, "__a__de___"},
		{"zero range keep size", func() error {
			return m.Fallocate(ctx, journal.Root, f.Ino, journal.FallocZeroRange|journal.FallocKeepSize, 5, 100)
		}, "__a_______"},
		{"allocate keep size", func() error { return m.Fallocate(ctx, journal.Root, f.Ino, journal.FallocKeepSize, 0, 100) }, "__a_______"},
		{"allocate", func() error { return m.Fallocate(ctx, journal.Root, f.Ino, 0, 11, 1) }, "__a_________"},
		{"truncate then extend", func() error {
			if _, err := m.SetAttr(ctx, journal.Root, f.Ino, journal.SetAttrIn{Valid: journal.SetSize, Size: 3}); err != nil {
				return err
			}
			_, err := m.SetAttr(ctx, journal.Root, f.Ino, journal.SetAttrIn{Valid: journal.SetSize, Size: 5})
			return err
		}, "__a__"},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := content(); got != s.want {
			t.Fatalf("%s: content %q, want %q", s.name, got, s.want)
		}
	}
	wantErr(t, m.Fallocate(ctx, journal.Root, f.Ino, journal.FallocPunchHole, 0, 1), journal.ErrNotSupported)
	wantErr(t, m.Fallocate(ctx, journal.Root, f.Ino, journal.FallocPunchHole|journal.FallocZeroRange|journal.FallocKeepSize, 0, 1), journal.ErrNotSupported)
	wantErr(t, m.Fallocate(ctx, journal.Root, f.Ino, 0, 0, 0), journal.ErrInvalid)

	s := must[journal.Attr](t)(m.Symlink(ctx, journal.Root, journal.RootIno, "s", "f"))
	p := must[journal.Attr](t)(m.Mknod(ctx, journal.Root, journal.RootIno, "p", journal.TypeFIFO, 0o644, 0))
	for _, ino := range []journal.Ino{s.Ino, p.Ino} {
		_, err := m.Read(ctx, ino, make([]byte, 1), 0)
		wantErr(t, err, journal.ErrInvalid)
		_, err = m.Write(ctx, journal.Root, ino, []byte("x"), 0)
		wantErr(t, err, journal.ErrInvalid)
		wantErr(t, m.Fallocate(ctx, journal.Root, ino, 0, 0, 1), journal.ErrNotSupported)
		_, err = m.Lseek(ctx, ino, 0, journal.SeekData)
		wantErr(t, err, journal.ErrInvalid)
		_, err = m.SetAttr(ctx, journal.Root, ino, journal.SetAttrIn{Valid: journal.SetSize})
		wantErr(t, err, journal.ErrInvalid)
	}
	if off := must[int64](t)(m.Lseek(ctx, f.Ino, 1, journal.SeekHole)); off != 5 {
		t.Fatalf("SEEK_HOLE from 1 = %d, want the size 5", off)
	}
	if off := must[int64](t)(m.Lseek(ctx, f.Ino, 1, journal.SeekData)); off != 1 {
		t.Fatalf("SEEK_DATA from 1 = %d, want 1 (no holes reported)", off)
	}
}
