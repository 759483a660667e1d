package journal_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"
)

// bigContent is file i's content: size bytes that differ from file to file.
func bigContent(i, size int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("<%07d>", i)), size/9+1)[:size]
}

// fillDir creates directory name under the root with files f00000... of
// size bytes each, and returns the directory and the expected contents.
func fillDir(t *testing.T, j *journal.Journal, name string, files, size int) (journal.Ino, map[string][]byte) {
	t.Helper()
	c := journal.Caller{UID: 1000, GID: 1000}
	d := must[journal.Attr](t)(j.Mkdir(ctx, c, journal.RootIno, name, 0o755))
	want := make(map[string][]byte, files)
	for i := range files {
		n := fmt.Sprintf("f%05d", i)
		f := must[journal.Attr](t)(j.Create(ctx, c, d.Ino, n, 0o644))
		data := bigContent(i, size)
		if size > 0 {
			if _, err := j.Write(ctx, c, f.Ino, data, 0); err != nil {
				t.Fatal(err)
			}
		}
		want[n] = data
	}
	return d.Ino, want
}

// checkDir lists directory name under the root and reads every file back.
func checkDir(t *testing.T, j *journal.Journal, name string, want map[string][]byte) {
	t.Helper()
	d, err := j.Lookup(ctx, journal.RootIno, name)
	if err != nil {
		t.Fatalf("Lookup %s: %v", name, err)
	}
	ents, err := j.ReadDir(ctx, d.Ino)
	if err != nil {
		t.Fatalf("ReadDir %s: %v", name, err)
	}
	if len(ents) != len(want) {
		t.Fatalf("%s has %d entries, want %d", name, len(ents), len(want))
	}
	for _, e := range ents {
		w, ok := want[e.Name]
		if !ok {
			t.Fatalf("%s/%s: unexpected", name, e.Name)
		}
		a, err := j.Lookup(ctx, d.Ino, e.Name)
		if err != nil {
			t.Fatalf("Lookup %s/%s: %v", name, e.Name, err)
		}
		if a.Ino != e.Ino || a.Size != uint64(len(w)) {
			t.Fatalf("%s/%s: inode %d size %d, want inode %d size %d", name, e.Name, a.Ino, a.Size, e.Ino, len(w))
		}
		if got := readAll(t, j, a.Ino); !bytes.Equal(got, w) {
			t.Fatalf("%s/%s: read %d bytes that differ from the %d written", name, e.Name, len(got), len(w))
		}
	}
}

// history returns the snapshots from head down, newest first.
func history(t *testing.T, st *chunkstore.Store, head chunkstore.ID) []chunkstore.ID {
	t.Helper()
	var ids []chunkstore.ID
	err := st.History(ctx, head, 0, func(id chunkstore.ID, _ *chunkstore.Snapshot) error {
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestJournal_BigDir: directories of many small files, whose inline content
// fills Badger transactions (issue 15: past about 600 files of 4 KB a
// directory load failed with ErrTxnTooBig, and so did every snapshot after
// a turn that created them).
func TestJournal_BigDir(t *testing.T) {
	for _, tc := range []struct{ files, size int }{{1000, 4000}, {2500, 1024}, {5000, chunkstore.InlineMax}} {
		t.Run(fmt.Sprintf("files=%d,size=%d", tc.files, tc.size), func(t *testing.T) {
			e := newEnv(t)
			j := e.open("ws", t.TempDir(), chunkstore.ID{})
			c := journal.Caller{UID: 1000, GID: 1000}
			d, want := fillDir(t, j, "d", tc.files, tc.size)
			snap1, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: "turn 1"})
			if err != nil {
				t.Fatalf("snapshot of %d files: %v", tc.files, err)
			}
			at1 := clone(want)
			checkDir(t, j, "d", want)

			// The next snapshots succeed too, and the history keeps them all.
			f0 := must[journal.Attr](t)(j.Lookup(ctx, d, "f00000"))
			if _, err := j.Write(ctx, c, f0.Ino, []byte("CHANGED"), 0); err != nil {
				t.Fatal(err)
			}
			copy(want["f00000"], "CHANGED")
			snap2, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: "turn 2"})
			if err != nil {
				t.Fatalf("second snapshot: %v", err)
			}
			x := must[journal.Attr](t)(j.Create(ctx, c, d, "extra", 0o644))
			if _, err := j.Write(ctx, c, x.Ino, []byte("extra"), 0); err != nil {
				t.Fatal(err)
			}
			want["extra"] = []byte("extra")
			snap3, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: "turn 3"})
			if err != nil {
				t.Fatalf("third snapshot: %v", err)
			}
			if got, wantIDs := history(t, e.store, snap3), []chunkstore.ID{snap3, snap2, snap1}; !slices.Equal(got, wantIDs) {
				t.Fatalf("history = %v, want %v", got, wantIDs)
			}
			checkDir(t, j, "d", want)

			// Another machine (a fresh journal on the same store) and a fork.
			checkDir(t, e.open("ws", t.TempDir(), chunkstore.ID{}), "d", want)
			fork := e.open("fork", t.TempDir(), snap1)
			checkDir(t, fork, "d", at1)

			// The fork changes the loaded directory and snapshots it.
			fd := must[journal.Attr](t)(fork.Lookup(ctx, journal.RootIno, "d"))
			if err := fork.Unlink(ctx, c, fd.Ino, "f00001"); err != nil {
				t.Fatal(err)
			}
			delete(at1, "f00001")
			fsnap, err := fork.Snapshot(ctx, journal.SnapshotOptions{})
			if err != nil {
				t.Fatalf("snapshot of the fork: %v", err)
			}
			checkDir(t, e.open("fork", t.TempDir(), fsnap), "d", at1)
		})
	}
}

func clone(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = bytes.Clone(v)
	}
	return out
}

// TestJournal_BigDirRestore: restoring a directory of many small files
// writes them in batches that fit a transaction, and replacing one whose
// files are hard links (each name's removal rewrites the record, inline
// content included) too.
func TestJournal_BigDirRestore(t *testing.T) {
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	c := journal.Caller{UID: 1000, GID: 1000}
	d, want := fillDir(t, j, "d", 1000, 4000)
	snap, err := j.Snapshot(ctx, journal.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every file gets a second name elsewhere, then d is restored over.
	links := must[journal.Attr](t)(j.Mkdir(ctx, c, journal.RootIno, "links", 0o755))
	for name := range want {
		f := must[journal.Attr](t)(j.Lookup(ctx, d, name))
		must[journal.Attr](t)(j.Link(ctx, c, f.Ino, links.Ino, name))
	}
	f0 := must[journal.Attr](t)(j.Lookup(ctx, d, "f00000"))
	if _, err := j.Write(ctx, c, f0.Ino, []byte("CHANGED"), 0); err != nil {
		t.Fatal(err)
	}
	linked := clone(want)
	copy(linked["f00000"], "CHANGED")
	if _, err := j.Restore(ctx, snap, []string{"d"}); err != nil {
		t.Fatalf("Restore over hard links: %v", err)
	}
	checkDir(t, j, "d", want)
	checkDir(t, j, "links", linked)
	for name := range linked {
		if a := must[journal.Attr](t)(j.Lookup(ctx, links.Ino, name)); a.Nlink != 1 {
			t.Fatalf("links/%s: nlink %d after its other name was replaced", name, a.Nlink)
		}
	}
	// Removed, then restored whole.
	if _, err := j.Restore(ctx, snap, []string{"links"}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Lookup(ctx, journal.RootIno, "links"); err == nil {
		t.Fatal("links is still there after a restore from a snapshot without it")
	}
	if err := j.Rename(ctx, c, journal.RootIno, "d", journal.RootIno, "gone", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Restore(ctx, snap, []string{"d"}); err != nil {
		t.Fatalf("Restore of a missing directory: %v", err)
	}
	checkDir(t, j, "d", want)
	snap2, err := j.Snapshot(ctx, journal.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh := e.open("ws", t.TempDir(), chunkstore.ID{})
	checkDir(t, fresh, "d", want)
	checkDir(t, fresh, "gone", want)
	if s := must[journal.Status](t)(j.Status(ctx)); s.Files != 2000 || s.Base != snap2 {
		t.Fatalf("status after the restores: %+v", s)
	}
}

// TestJournal_BigDir100k: a directory of 100,000 entries snapshots, loads
// on another machine in batches, and lists and looks up whole. Logs how
// long each step takes.
func TestJournal_BigDir100k(t *testing.T) {
	const files = 100_000
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	start := time.Now()
	_, want := fillDir(t, j, "d", files, 0)
	created := time.Since(start)
	start = time.Now()
	snap, err := j.Snapshot(ctx, journal.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snapped := time.Since(start)
	fresh := e.open("ws", t.TempDir(), chunkstore.ID{})
	start = time.Now()
	d := must[journal.Attr](t)(fresh.Lookup(ctx, journal.RootIno, "d"))
	ents := must[[]journal.DirEntry](t)(fresh.ReadDir(ctx, d.Ino)) // loads d
	loaded := time.Since(start)
	if len(ents) != files {
		t.Fatalf("fresh journal lists %d entries, want %d", len(ents), files)
	}
	checkDir(t, fresh, "d", want)
	fork := e.open("fork", t.TempDir(), snap)
	checkDir(t, fork, "d", want)
	t.Logf("directory of %d empty files: create %v, snapshot %v, load on a fresh journal %v", files, created, snapped, loaded)
}
