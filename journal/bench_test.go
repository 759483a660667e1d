package journal_test

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/journal"

	"github.com/cairnfs/cairn/internal/testenv"
)

func benchJournal(b *testing.B) *journal.Journal {
	b.Helper()
	store := chunkstoretest.NewStore(b, chunkstoretest.LocalBackend(b), chunkstore.InitOptions{}, chunkstore.Options{})
	j, err := journal.Open(ctx, journal.Config{Dir: b.TempDir(), Store: store, Workspace: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { j.Close() })
	return j
}

// dirFor spreads names over directories of 1000 entries, as a source tree
// would.
func dirFor(b *testing.B, j *journal.Journal, dirs map[int]journal.Ino, i int) journal.Ino {
	d, ok := dirs[i/1000]
	if !ok {
		a, err := j.Mkdir(ctx, journal.Root, journal.RootIno, "d"+strconv.Itoa(i/1000), 0o755)
		if err != nil {
			b.Fatal(err)
		}
		d = a.Ino
		dirs[i/1000] = d
	}
	return d
}

func BenchmarkCreate(b *testing.B) {
	j := benchJournal(b)
	dirs := map[int]journal.Ino{}
	i := 0
	for b.Loop() {
		if _, err := j.Create(ctx, journal.Root, dirFor(b, j, dirs, i), "f"+strconv.Itoa(i), 0o644); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkLookup(b *testing.B) {
	j := benchJournal(b)
	dirs := map[int]journal.Ino{}
	const n = 10000
	for i := range n {
		if _, err := j.Create(ctx, journal.Root, dirFor(b, j, dirs, i), "f"+strconv.Itoa(i), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		k := i % n
		if _, err := j.Lookup(ctx, dirs[k/1000], "f"+strconv.Itoa(k)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkUnlink(b *testing.B) {
	j := benchJournal(b)
	dirs := map[int]journal.Ino{}
	for i := range b.N {
		if _, err := j.Create(ctx, journal.Root, dirFor(b, j, dirs, i), "f"+strconv.Itoa(i), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if err := j.Unlink(ctx, journal.Root, dirs[i/1000], "f"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// bigWorkspace builds a snapshotted workspace of n small files in
// directories of 1000 and returns the journal and a file to change.
func bigWorkspace(b *testing.B, n int) (*journal.Journal, journal.Ino) {
	j := benchJournal(b)
	dirs := map[int]journal.Ino{}
	var last journal.Ino
	for i := range n {
		a, err := j.Create(ctx, journal.Root, dirFor(b, j, dirs, i), "f"+strconv.Itoa(i), 0o644)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := j.Write(ctx, journal.Root, a.Ino, []byte("content of file "+strconv.Itoa(i)+"\n"), 0); err != nil {
			b.Fatal(err)
		}
		last = a.Ino
	}
	if _, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: "base"}); err != nil {
		b.Fatal(err)
	}
	return j, last
}

// BenchmarkSnapshotSmallChange: one changed file in a 100k-file workspace.
func BenchmarkSnapshotSmallChange(b *testing.B) {
	j, f := bigWorkspace(b, 100_000)
	i := 0
	for b.Loop() {
		if _, err := j.Write(ctx, journal.Root, f, []byte(fmt.Sprintf("change %d\n", i)), 0); err != nil {
			b.Fatal(err)
		}
		if _, err := j.Snapshot(ctx, journal.SnapshotOptions{}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRollback: roll a 100k-file workspace with one changed file back
// to its base (which snapshots the change first). Only Rollback is timed;
// after it, inode numbers are valid again once looked up (the kernel's
// caches were invalidated), so each round looks the file up first.
func BenchmarkRollback(b *testing.B) {
	const n = 100_000
	j, _ := bigWorkspace(b, n)
	base := j.Base()
	name := "f" + strconv.Itoa(n-1)
	dir := "d" + strconv.Itoa((n-1)/1000)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		d, err := j.Lookup(ctx, journal.RootIno, dir)
		if err != nil {
			b.Fatal(err)
		}
		f, err := j.Lookup(ctx, d.Ino, name)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := j.Write(ctx, journal.Root, f.Ino, []byte(fmt.Sprintf("change %d\n", i)), 0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := j.Rollback(ctx, base, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemory100k reports the memory of a mounted 100k-file workspace:
// a journal opened on a snapshot of 100k files (built by another journal,
// closed first) with every directory loaded by a walk. RSS growth is
// measured from after the build, with freed memory returned to the OS on
// both sides, so it counts what the mounted journal holds.
func BenchmarkMemory100k(b *testing.B) {
	for b.Loop() {
		builder, _ := bigWorkspace(b, 100_000)
		snap := builder.Base()
		store := builder.Store()
		builder.Close()
		debug.FreeOSMemory()
		before := rss()
		j, err := journal.Open(ctx, journal.Config{Dir: b.TempDir(), Store: store, Workspace: "mounted", From: snap})
		if err != nil {
			b.Fatal(err)
		}
		ents, err := j.ReadDir(ctx, journal.RootIno)
		if err != nil {
			b.Fatal(err)
		}
		files := 0
		for _, e := range ents {
			sub, err := j.ReadDir(ctx, e.Ino)
			if err != nil {
				b.Fatal(err)
			}
			files += len(sub)
		}
		if files != 100_000 {
			b.Fatalf("walked %d files", files)
		}
		debug.FreeOSMemory()
		b.ReportMetric(float64(rss()-before)/1e6, "rss-MB")
		j.Close()
	}
}

func rss() uint64 { return testenv.RSS() }

// BenchmarkFork: fork a workspace of 100 and of 100k files, as `cairn fork`
// does in-process (resolve the source, check the name is free, create the
// ref), then open the fork's journal and look at its root, as a mount does.
// Both are O(1): the two sizes should take the same time.
func BenchmarkFork(b *testing.B) {
	for _, n := range []int{100, 100_000} {
		j, _ := bigWorkspace(b, n)
		st := j.Store()
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				name := fmt.Sprintf("fork-%d-%d", n, i)
				id, err := st.Resolve(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := st.Ref(ctx, name); err == nil {
					b.Fatal("name taken")
				}
				if _, err := st.SetRef(ctx, name, id, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("files=%d+open", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				name := fmt.Sprintf("forkopen-%d-%d", n, i)
				if _, err := st.SetRef(ctx, name, j.Base(), nil); err != nil {
					b.Fatal(err)
				}
				f, err := journal.Open(ctx, journal.Config{Dir: b.TempDir(), Store: st, Workspace: name})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.ReadDir(ctx, journal.RootIno); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

// BenchmarkColdWalk: the journal's half of a cold `find` after a resume:
// open a journal on a snapshot of 25k files in 25 directories and list
// every directory, which loads each from its base tree.
func BenchmarkColdWalk(b *testing.B) {
	const n = 25_000
	builder, _ := bigWorkspace(b, n)
	snap, store := builder.Base(), builder.Store()
	for b.Loop() {
		b.StopTimer()
		j, err := journal.Open(ctx, journal.Config{Dir: b.TempDir(), Store: store, Workspace: "walk", From: snap})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ents, err := j.ReadDir(ctx, journal.RootIno)
		if err != nil {
			b.Fatal(err)
		}
		files := 0
		for _, e := range ents {
			sub, err := j.ReadDir(ctx, e.Ino)
			if err != nil {
				b.Fatal(err)
			}
			files += len(sub)
		}
		b.StopTimer()
		if files != n {
			b.Fatalf("walked %d files", files)
		}
		j.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/walk")
}

// cpuPerOp starts counting the process's CPU time (user and system, every
// goroutine's: Badger's too); the function it returns reports it per
// operation as "cpu-ns/op", a figure the machine's other load moves less
// than the wall-clock ns/op.
func cpuPerOp(b *testing.B) func() {
	b.Helper()
	start := processCPU(b)
	return func() {
		b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
	}
}

func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
