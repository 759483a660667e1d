package chunkstore_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

// The cache in front of a real S3 server: coalesced tree walks, hits with
// no GET, a cache that survives a restart, and damage on the server still
// reported as ErrCorrupt naming the blob and the pack.
func TestCache_S3(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	s := chunkstoretest.NewStore(t, srv.Backend(t, bucket, "c"), chunkstore.InitOptions{}, chunkstore.Options{})
	tt := writeTree(t, s, 1000, 2, func(i int) int { return 500 + i%4000 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cache := t.TempDir()
	s1 := reopen(t, srv.Backend(t, bucket, "c"), chunkstore.Options{CacheDir: cache})
	if n := walkTrees(t, s1, tt.root); n != 1001 {
		t.Fatalf("walked %d trees", n)
	}
	st := s1.Stats()
	t.Logf("walk of 1001 trees on an empty cache: %d GETs, %d bytes", st.Gets, st.FetchedBytes)
	if st.Gets > 4 {
		t.Fatalf("walk of 1001 trees cost %d GETs; want a few (coalesced)", st.Gets)
	}
	walkTrees(t, s1, tt.root)
	if got := s1.Stats().Gets; got != st.Gets {
		t.Fatalf("second walk: %d GETs, want 0", got-st.Gets)
	}
	readTree(t, s1, tt)
	t.Logf("then %d files: %d GETs", len(tt.files), s1.Stats().Gets-st.Gets)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := reopen(t, srv.Backend(t, bucket, "c"), chunkstore.Options{CacheDir: cache})
	readTree(t, s2, tt)
	if st := s2.Stats(); st.Gets != 0 || st.CacheMisses != 0 {
		t.Fatalf("after a restart: %d GETs, %d misses; want none", st.Gets, st.CacheMisses)
	}

	// Damage a pack behind the server's back.
	packs, _ := filepath.Glob(filepath.Join(srv.Dir(), bucket, "c", "packs", "*", "*"))
	var victim string
	for _, p := range packs {
		if info, err := os.Stat(p); err == nil && info.Size() > 1<<20 {
			victim = p
		}
	}
	if victim == "" {
		t.Fatalf("no pack of more than 1 MiB among %v", packs)
	}
	raw, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	raw[1000] ^= 1 // in its first blobs
	if err := os.WriteFile(victim, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s3 := reopen(t, srv.Backend(t, bucket, "c"), chunkstore.Options{CacheDir: t.TempDir()})
	var bad error
	for p, fc := range tt.fcs {
		f, err := s3.OpenFile(ctx, fc)
		if err == nil {
			_, err = f.WriteTo(io.Discard)
		}
		if err != nil {
			if bad != nil {
				continue
			}
			bad = err
			if !errors.Is(err, chunkstore.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(victim)) {
				t.Fatalf("%s: err = %v, want ErrCorrupt naming pack %s", p, err, filepath.Base(victim))
			}
		}
	}
	if bad == nil {
		t.Fatal("no read failed after the pack was damaged")
	}
	t.Logf("damaged pack: %v", bad)
}

// BenchmarkRead10k reads every file of a 10k-file tree (500 directories,
// 20 files each: mostly 1-16 KiB, one in 500 of 2 MiB; 118 MB) from
// versitygw on loopback, after opening the store anew: on an empty cache
// (cold), on an empty cache after Warmup (cold+warmup, timed together), on a
// full cache (warm), and without a cache (nocache: a GET per blob, what
// reads cost before the cache).
func BenchmarkRead10k(b *testing.B) {
	srv := s3test.Start(b)
	bucket := srv.NewBucket(b)
	s := chunkstoretest.NewStore(b, srv.Backend(b, bucket, "b"), chunkstore.InitOptions{}, chunkstore.Options{})
	tt := writeTree(b, s, 500, 20, func(i int) int {
		if i%500 == 499 {
			return 2 << 20
		}
		return 1000 + (i*7919)%15000
	})
	var total int64
	for _, d := range tt.files {
		total += int64(len(d))
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	warm := b.TempDir()
	run := func(b *testing.B, opts func() chunkstore.Options, warmup bool) {
		b.SetBytes(total)
		var gets uint64
		for b.Loop() {
			s, err := chunkstore.Open(ctx, srv.Backend(b, bucket, "b"), opts())
			if err != nil {
				b.Fatal(err)
			}
			if warmup {
				if err := s.Warmup(ctx, tt.root, nil); err != nil {
					b.Fatal(err)
				}
			}
			readTree(b, s, tt)
			gets += s.Stats().Gets
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(gets)/float64(b.N), "GETs/op")
	}
	b.Run("cold", func(b *testing.B) {
		run(b, func() chunkstore.Options { return chunkstore.Options{CacheDir: b.TempDir()} }, false)
	})
	b.Run("cold+warmup", func(b *testing.B) {
		run(b, func() chunkstore.Options { return chunkstore.Options{CacheDir: b.TempDir()} }, true)
	})
	b.Run("warm", func(b *testing.B) {
		s := reopenTB(b, srv.Backend(b, bucket, "b"), chunkstore.Options{CacheDir: warm})
		if err := s.Warmup(ctx, tt.root, nil); err != nil {
			b.Fatal(err)
		}
		s.Close()
		b.ResetTimer()
		run(b, func() chunkstore.Options { return chunkstore.Options{CacheDir: warm} }, false)
	})
	b.Run("nocache", func(b *testing.B) {
		run(b, func() chunkstore.Options { return chunkstore.Options{} }, false)
	})
	// The same tree on a local store, for the warm case to be measured
	// against (the target: within 10%).
	b.Run("local", func(b *testing.B) {
		be := chunkstoretest.LocalBackend(b)
		ls := chunkstoretest.NewStore(b, be, chunkstore.InitOptions{}, chunkstore.Options{})
		lt := writeTree(b, ls, 500, 20, func(i int) int {
			if i%500 == 499 {
				return 2 << 20
			}
			return 1000 + (i*7919)%15000
		})
		ls.Close()
		b.SetBytes(total)
		for b.Loop() {
			s, err := chunkstore.Open(ctx, be, chunkstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			readTree(b, s, lt)
			s.Close()
		}
	})
}

func reopenTB(tb testing.TB, be backend.Backend, opts chunkstore.Options) *chunkstore.Store {
	tb.Helper()
	s, err := chunkstore.Open(ctx, be, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
