package journal_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"
)

// subtree describes the live tree under path (inode numbers left out:
// restored entries get fresh ones), keyed by path relative to it.
func subtree(t *testing.T, j *journal.Journal, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for p, desc := range tree(t, j) {
		if p != path && !strings.HasPrefix(p, path+"/") {
			continue
		}
		// Drop the inode number, the first field.
		f := strings.Fields(desc)
		out[strings.TrimPrefix(p, path)] = strings.Join(f[1:], " ")
	}
	return out
}

func lookupPath(t *testing.T, j *journal.Journal, path string) (journal.Attr, error) {
	t.Helper()
	ino := journal.RootIno
	var a journal.Attr
	for _, n := range strings.Split(strings.Trim(path, "/"), "/") {
		var err error
		if a, err = j.Lookup(ctx, ino, n); err != nil {
			return a, err
		}
		ino = a.Ino
	}
	return a, nil
}

func TestJournal_Restore(t *testing.T) {
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	root := journal.RootIno
	c := journal.Caller{UID: 1000, GID: 1000}
	mk := must[journal.Attr](t)
	write := func(ino journal.Ino, s string) {
		t.Helper()
		if _, err := j.Write(ctx, c, ino, []byte(s), 0); err != nil {
			t.Fatal(err)
		}
	}
	src := mk(j.Mkdir(ctx, c, root, "src", 0o755))
	a := mk(j.Create(ctx, c, src.Ino, "a.go", 0o644))
	write(a.Ino, "package a\n")
	b := mk(j.Create(ctx, c, src.Ino, "b.go", 0o644))
	write(b.Ino, strings.Repeat("b", 100_000))
	sub := mk(j.Mkdir(ctx, c, src.Ino, "sub", 0o700))
	cf := mk(j.Create(ctx, c, sub.Ino, "c.go", 0o600))
	write(cf.Ino, "package sub\n")
	if err := j.SetXattr(ctx, c, cf.Ino, "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	mk(j.Link(ctx, c, cf.Ino, src.Ino, "c-link.go")) // a hard link inside src
	mk(j.Symlink(ctx, c, src.Ino, "sym", "sub/c.go"))
	docs := mk(j.Mkdir(ctx, c, root, "docs", 0o755))
	readme := mk(j.Create(ctx, c, docs.Ino, "README", 0o644))
	write(readme.Ino, "# docs\n")
	s1 := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{Message: "s1"}))
	wantSrc, wantDocs := subtree(t, j, "/src"), subtree(t, j, "/docs")

	// Change everything that can change.
	write(a.Ino, "package a // changed\n")
	if _, err := j.SetAttr(ctx, c, b.Ino, journal.SetAttrIn{Valid: journal.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if err := j.Unlink(ctx, c, sub.Ino, "c.go"); err != nil {
		t.Fatal(err)
	}
	mk(j.Create(ctx, c, sub.Ino, "new.go", 0o644))
	if err := j.Rename(ctx, c, root, "docs", root, "docs2", 0); err != nil {
		t.Fatal(err)
	}
	extra := mk(j.Create(ctx, c, root, "extra", 0o644))
	write(extra.Ino, "extra\n")

	// Errors change nothing.
	head := j.Base()
	for _, tc := range []struct {
		paths []string
		want  error
	}{
		{[]string{"/"}, journal.ErrInvalid},
		{[]string{"."}, journal.ErrInvalid},
		{nil, journal.ErrInvalid},
		{[]string{"src", "nothere"}, journal.ErrNotFound},
		{[]string{"extra/x"}, journal.ErrNotDir},
	} {
		if _, err := j.Restore(ctx, s1, tc.paths); !errors.Is(err, tc.want) {
			t.Errorf("Restore(%q): %v, want %v", tc.paths, err, tc.want)
		}
	}
	if j.Base() != head {
		t.Fatal("a failed restore took a snapshot")
	}

	res, err := j.Restore(ctx, s1, []string{"src", "/docs/", "extra", "src/sub"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Paths) != 3 || res.Paths[0].Path != "docs" || res.Paths[1].Path != "extra" || !res.Paths[1].Removed || res.Paths[2].Path != "src" || res.Paths[2].Inodes != 7 {
		t.Errorf("result paths: %+v", res.Paths)
	}
	// Before holds the changed state.
	before := must[*chunkstore.Snapshot](t)(e.store.Snapshot(ctx, res.Before))
	if _, err := e.store.Lookup(ctx, before.Root, "src/sub/new.go"); err != nil {
		t.Errorf("the snapshot before the restore lacks src/sub/new.go: %v", err)
	}
	if res.Before == s1 || res.Before != j.Base() {
		t.Errorf("before %s, s1 %s, base %s", res.Before.Short(), s1.Short(), j.Base().Short())
	}
	check := func(j *journal.Journal, when string) {
		t.Helper()
		if got := subtree(t, j, "/src"); !equalMaps(got, wantSrc) {
			diffMaps(t, wantSrc, got)
			t.Fatalf("%s: src differs from the snapshot's", when)
		}
		if got := subtree(t, j, "/docs"); !equalMaps(got, wantDocs) {
			diffMaps(t, wantDocs, got)
			t.Fatalf("%s: docs differs from the snapshot's", when)
		}
		if _, err := lookupPath(t, j, "extra"); !errors.Is(err, journal.ErrNotFound) {
			t.Fatalf("%s: extra still there: %v", when, err)
		}
		if _, err := lookupPath(t, j, "docs2/README"); err != nil {
			t.Fatalf("%s: docs2, not restored, is gone: %v", when, err)
		}
		c1, _ := lookupPath(t, j, "src/sub/c.go")
		c2, _ := lookupPath(t, j, "src/c-link.go")
		if c1.Ino != c2.Ino || c1.Nlink != 2 {
			t.Fatalf("%s: the hard link is not one inode: %+v %+v", when, c1, c2)
		}
	}
	check(j, "live")
	// The restore is a live change: the next snapshot has it, and a
	// resume from that snapshot sees it.
	s3 := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{Message: "after restore"}))
	check(j, "after the snapshot")
	check(e.open("ws", t.TempDir(), chunkstore.ID{}), "resumed")
	st := must[journal.Status](t)(j.Status(ctx))
	rec := must[*chunkstore.Snapshot](t)(e.store.Snapshot(ctx, s3))
	if rec.Stats.Files != st.Files || st.Files != 5 { // a.go b.go c.go(2 names) README docs2/README... counted once each
		t.Errorf("files: record %d, live %d", rec.Stats.Files, st.Files)
	}

	// Missing ancestors are made as the snapshot has them, empty but for
	// the restored path.
	if err := j.Unlink(ctx, c, must[journal.Attr](t)(lookupPath(t, j, "docs")).Ino, "README"); err != nil {
		t.Fatal(err)
	}
	if err := j.Rmdir(ctx, c, root, "docs"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Restore(ctx, s1, []string{"docs/README"}); err != nil {
		t.Fatal(err)
	}
	if got := subtree(t, j, "/docs"); !equalMaps(got, wantDocs) {
		diffMaps(t, wantDocs, got)
		t.Fatal("docs/README restored into a missing docs differs")
	}
}

func TestJournal_Progress(t *testing.T) {
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	c := journal.Caller{}
	if p := j.Progress(); p.Op != "" || p.Busy {
		t.Fatalf("fresh journal: %+v", p)
	}
	for i, size := range []int{10, 200_000, 300_000} {
		f := must[journal.Attr](t)(j.Create(ctx, c, journal.RootIno, "f"+string(rune('a'+i)), 0o644))
		if _, err := j.Write(ctx, c, f.Ino, bytes.Repeat([]byte{byte(i)}, size), 0); err != nil {
			t.Fatal(err)
		}
	}
	s1 := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	if p := j.Progress(); p.Op != "snapshot" || p.Busy || p.Files != 3 || p.Bytes != 500_000 {
		t.Errorf("after a snapshot of 3 files (500k bytes in chunked ones): %+v", p)
	}
	if _, err := j.Restore(ctx, s1, []string{"fa", "fb"}); err != nil {
		t.Fatal(err)
	}
	if p := j.Progress(); p.Op != "restore" || p.Busy || p.Files != 2 {
		t.Errorf("after a restore of 2 files: %+v", p)
	}
}
