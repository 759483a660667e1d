package chunkstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/local"

	"github.com/cairnfs/cairn/internal/testenv"
)

// openWithBlobs makes a store whose index lists n blobs (written as index
// files, the way Flush writes them, without the packs: Open never reads
// packs) and returns the live heap Open added, measured after GC, and the
// growth of the process's RSS.
func openWithBlobs(tb testing.TB, n int) (heap, rss uint64) {
	tb.Helper()
	ctx := context.Background()
	be, err := local.Open(tb.TempDir(), local.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := Init(ctx, be, InitOptions{}); err != nil {
		tb.Fatal(err)
	}
	s, err := Open(ctx, be, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	// One index file per ~16 MiB pack of 64 KiB chunks is the real shape;
	// use packs of 256 blobs and index files of 64 packs.
	const perPack, perIndex = 256, 64
	var f indexFile
	var blob [8]byte
	flush := func() {
		data := encodeIndex(&f)
		if _, err := be.Put(ctx, indexKey(s.hasher.Sum(data)), bytes.NewReader(data), backend.Condition{}); err != nil {
			tb.Fatal(err)
		}
		f = indexFile{}
	}
	for i := 0; i < n; i += perPack {
		p := indexPack{}
		binary.LittleEndian.PutUint64(blob[:], uint64(i)|1<<63)
		p.ID = s.hasher.Sum(blob[:])
		off := uint32(packHeaderSize)
		for j := i; j < i+perPack && j < n; j++ {
			binary.LittleEndian.PutUint64(blob[:], uint64(j))
			p.Entries = append(p.Entries, packEntry{ID: s.hasher.Sum(blob[:]), Kind: KindData, Comp: compZstd, Offset: off, Stored: 30000, Raw: 65536})
			off += 30000
		}
		f.Packs = append(f.Packs, p)
		if len(f.Packs) == perIndex {
			flush()
		}
	}
	if len(f.Packs) > 0 {
		flush()
	}
	s.Close()

	before := liveHeap()
	rssBefore := testenv.RSS()
	s2, err := Open(ctx, be, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	heap = liveHeap() - before
	rss = testenv.RSS() - rssBefore
	if got := s2.Stats().Blobs; got != n {
		tb.Fatalf("index holds %d blobs, want %d", got, n)
	}
	runtime.KeepAlive(s2)
	s2.Close()
	return heap, rss
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestIndexMemory checks the bound: the local index of 1 M blobs
// costs at most 200 MB.
func TestIndexMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 1M-blob index; run without -short (make unit does)")
	}
	heap, rss := openWithBlobs(t, 1_000_000)
	t.Logf("1M blobs: live heap %d MB, RSS growth %d MB", heap>>20, rss>>20)
	if heap > 200<<20 {
		t.Fatalf("index of 1M blobs holds %d MB of heap, limit 200 MB", heap>>20)
	}
}

// BenchmarkIndexMemory reports the memory of a 1M-blob index.
func BenchmarkIndexMemory(b *testing.B) {
	var heap, rss uint64
	for b.Loop() {
		heap, rss = openWithBlobs(b, 1_000_000)
	}
	b.ReportMetric(float64(heap)/1e6, "heap-MB/1M-blobs")
	b.ReportMetric(float64(rss)/1e6, "rss-MB/1M-blobs")
}
