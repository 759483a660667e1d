package journal_test

import (
	"strconv"
	"testing"

	"github.com/cairnfs/cairn/journal"
)

// BenchmarkCreateOpenRelease is what `open(O_CREAT)` + `close` costs the
// journal through the FUSE layer with passthrough: CreateOpen (FUSE_CREATE)
// with a backing file for writing, release.
func BenchmarkCreateOpenRelease(b *testing.B) {
	j, _ := bigWorkspace(b, 0)
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := range b.N {
		_, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "f"+strconv.Itoa(i), 0o644, true, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Release(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUntarFile is what one regular file of `tar -x` (as root) costs
// the journal through the FUSE layer with passthrough: the requests the
// kernel sends for it, counted at a real mount (LOOKUP, CREATE, two
// GETXATTR security.capability, a write through the backing file, SETATTR
// for chown, chmod and the times, RELEASE).
func BenchmarkUntarFile(b *testing.B) {
	j, _ := bigWorkspace(b, 0)
	dirs := map[int]journal.Ino{}
	data := make([]byte, 4096)
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := range b.N {
		d := dirFor(b, j, dirs, i)
		name := "f" + strconv.Itoa(i)
		if _, err := j.Lookup(ctx, d, name); err == nil {
			b.Fatal("exists")
		}
		a, h, err := j.CreateOpen(ctx, journal.Root, d, name, 0o644, true, true)
		if err != nil {
			b.Fatal(err)
		}
		for range 2 {
			if _, err := j.GetXattr(ctx, a.Ino, "security.capability"); err == nil {
				b.Fatal("xattr")
			}
		}
		if _, err := h.Backing().WriteAt(data, 0); err != nil {
			b.Fatal(err)
		}
		for _, in := range []journal.SetAttrIn{
			{Valid: journal.SetUID | journal.SetGID, UID: 1000, GID: 1000},
			{Valid: journal.SetMode, Mode: 0o644},
			{Valid: journal.SetAtime | journal.SetMtime, Atime: 1e18, Mtime: 1e18},
		} {
			if _, err := j.SetAttr(ctx, journal.Root, a.Ino, in); err != nil {
				b.Fatal(err)
			}
		}
		if err := j.Release(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetXattrNone is GETXATTR of an xattr a file does not have (the
// kernel asks for security.capability twice per file written).
func BenchmarkGetXattrNone(b *testing.B) {
	j, a := benchFile(b)
	defer cpuPerOp(b)()
	for b.Loop() {
		if _, err := j.GetXattr(ctx, a.Ino, "security.capability"); err == nil {
			b.Fatal("xattr")
		}
	}
}

// BenchmarkGetAttr is GETATTR of a file whose record is cached (the
// kernel asks for a directory's attributes after each create in it).
func BenchmarkGetAttr(b *testing.B) {
	j, a := benchFile(b)
	defer cpuPerOp(b)()
	for b.Loop() {
		if _, err := j.GetAttr(ctx, a.Ino); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSetAttr is SETATTR (chmod) of a new file: tar sets the owner,
// mode and times of each file it makes.
func BenchmarkSetAttr(b *testing.B) {
	j, a := benchFile(b)
	defer cpuPerOp(b)()
	i := 0
	for b.Loop() {
		if _, err := j.SetAttr(ctx, journal.Root, a.Ino, journal.SetAttrIn{Valid: journal.SetMode, Mode: 0o600 | uint32(i&1)}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkOpenReadRelease is `open(O_RDONLY)` + `close` of files written
// before (git add after tar -x) through the FUSE layer with passthrough:
// Open with a backing file for reading, release.
func BenchmarkOpenReadRelease(b *testing.B) {
	j := benchJournal(b)
	const files = 1000
	inos := make([]journal.Ino, files)
	for i := range inos {
		a, err := j.Create(ctx, journal.Root, journal.RootIno, "f"+strconv.Itoa(i), 0o644)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := j.Write(ctx, journal.Root, a.Ino, []byte("content"), 0); err != nil {
			b.Fatal(err)
		}
		inos[i] = a.Ino
	}
	defer cpuPerOp(b)()
	i := 0
	for b.Loop() {
		h, err := j.Open(ctx, journal.Root, inos[i%files], false, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Release(ctx, h); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// benchFile is a journal for a benchmark with one new file, f.
func benchFile(b *testing.B) (*journal.Journal, journal.Attr) {
	b.Helper()
	j := benchJournal(b)
	a, err := j.Create(ctx, journal.Root, journal.RootIno, "f", 0o644)
	if err != nil {
		b.Fatal(err)
	}
	return j, a
}
