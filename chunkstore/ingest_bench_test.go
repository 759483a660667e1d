package chunkstore_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
)

// ingestCorpus is the mixed workload of BenchmarkIngest: a real source tree
// (the Go distribution's src/, on every machine with Go) plus an equal
// amount of random bytes in large files (incompressible data: build outputs,
// media, compressed archives).
var ingestCorpus = sync.OnceValue(func() [][]byte {
	var files [][]byte
	var total int
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		panic("go env GOROOT: " + err.Error())
	}
	root := filepath.Join(strings.TrimSpace(string(out)), "src")
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || total >= 128<<20 {
			return nil
		}
		data, err := os.ReadFile(p)
		if err == nil {
			files = append(files, data)
			total += len(data)
		}
		return nil
	})
	src := total
	for i := uint64(0); total < 2*src; i++ {
		data := randData(1000+i, 16<<20)
		files = append(files, data)
		total += len(data)
	}
	return files
})

// BenchmarkIngest measures the whole write path: chunk, hash, dedupe,
// compress, pack and write to the local backend, then Flush (packs and index
// durable on disk). Every iteration ingests into a new store, so nothing is
// deduplicated against earlier iterations. Files are ingested by
// GOMAXPROCS goroutines, as a commit of many dirty files would.
func BenchmarkIngest(b *testing.B) {
	files := ingestCorpus()
	var total int64
	for _, f := range files {
		total += int64(len(f))
	}
	b.SetBytes(total)
	var stored, raw uint64
	for b.Loop() {
		b.StopTimer()
		be, err := local.Open(b.TempDir(), local.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := chunkstore.Init(ctx, be, chunkstore.InitOptions{}); err != nil {
			b.Fatal(err)
		}
		s, err := chunkstore.Open(ctx, be, chunkstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= len(files) {
						return
					}
					if _, err := s.PutFile(ctx, bytes.NewReader(files[i])); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st := s.Stats()
		stored, raw = st.NewStoredBytes, st.NewRawBytes
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(stored)/float64(raw)*100, "stored-%")
}
