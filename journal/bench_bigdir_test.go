package journal_test

import (
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"
)

// BenchmarkBigDir: one directory of many files. load: a fresh journal on
// its snapshot lists it (loads it from its base tree); snapshot: one file
// of it changes and the workspace is snapshotted (the directory's tree is
// rebuilt). Files of 4,000 bytes keep their content inline in the records.
func BenchmarkBigDir(b *testing.B) {
	for _, tc := range []struct{ files, size int }{{100_000, 0}, {5000, 4000}} {
		store, snap, j, d := bigDir(b, tc.files, tc.size)
		name := fmt.Sprintf("files=%d,size=%d", tc.files, tc.size)
		b.Run(name+"/load", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				f, err := journal.Open(ctx, journal.Config{Dir: b.TempDir(), Store: store, Workspace: "load", From: snap})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				a, err := f.Lookup(ctx, journal.RootIno, "d")
				if err != nil {
					b.Fatal(err)
				}
				ents, err := f.ReadDir(ctx, a.Ino)
				if err != nil || len(ents) != tc.files {
					b.Fatalf("ReadDir: %d entries, %v", len(ents), err)
				}
				b.StopTimer()
				f.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/load")
		})
		b.Run(name+"/snapshot", func(b *testing.B) {
			c := journal.Caller{UID: 1000, GID: 1000}
			i := 0
			for b.Loop() {
				i++
				b.StopTimer()
				_, err := j.Create(ctx, c, d, fmt.Sprintf("new%d", i), 0o644)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := j.Snapshot(ctx, journal.SnapshotOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/snapshot")
		})
	}
}

// bigDir makes a workspace whose /d holds files files of size bytes, and
// snapshots it.
func bigDir(b *testing.B, files, size int) (*chunkstore.Store, chunkstore.ID, *journal.Journal, journal.Ino) {
	b.Helper()
	j := benchJournal(b)
	c := journal.Caller{UID: 1000, GID: 1000}
	d, err := j.Mkdir(ctx, c, journal.RootIno, "d", 0o755)
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	for i := range files {
		f, err := j.Create(ctx, c, d.Ino, fmt.Sprintf("f%06d", i), 0o644)
		if err != nil {
			b.Fatal(err)
		}
		if size > 0 {
			data[0] = byte(i)
			if _, err := j.Write(ctx, c, f.Ino, data, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	snap, err := j.Snapshot(ctx, journal.SnapshotOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return j.Store(), snap, j, d.Ino
}
