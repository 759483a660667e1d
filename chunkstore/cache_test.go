package chunkstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

// remoteBackend is a local backend that counts calls and passes for a
// remote one, so stores on it use their blob cache.
func remoteBackend(t *testing.T) (*chunkstoretest.Faulty, string) {
	t.Helper()
	dir := t.TempDir()
	be, err := local.Open(dir, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	f := chunkstoretest.NewFaulty(be)
	f.Remote = true
	return f, dir
}

// packGets counts the pack GETs a function makes.
func packGets(f *chunkstoretest.Faulty, fn func()) int {
	before := f.Count(chunkstoretest.OpGet, "packs/")
	fn()
	return f.Count(chunkstoretest.OpGet, "packs/") - before
}

// testTree is a tree written the way a snapshot writes one: every file's
// data first, then the trees bottom-up, all in one flush.
type testTree struct {
	root  chunkstore.ID
	trees []chunkstore.ID   // every tree, root last
	files map[string][]byte // path -> content
	fcs   map[string]chunkstore.FileContent
}

// writeTree writes dirs directories (a root with sqrt-ish fan-out: top-level
// directories of up to 32 subdirectories) holding files files each, of
// size(i) bytes.
func writeTree(tb testing.TB, s *chunkstore.Store, dirs, files int, size func(i int) int) *testTree {
	tb.Helper()
	tt := &testTree{files: map[string][]byte{}, fcs: map[string]chunkstore.FileContent{}}
	ino := uint64(1)
	fileEntries := func(dir string) []chunkstore.Entry {
		var es []chunkstore.Entry
		for f := range files {
			name := fmt.Sprintf("f%03d", f)
			i := len(tt.files)
			data := textData(uint64(i), size(i))
			copy(data, fmt.Sprintf("%s/%s;", dir, name)) // no two files alike
			fc, err := s.PutFile(ctx, bytes.NewReader(data))
			if err != nil {
				tb.Fatal(err)
			}
			tt.files[dir+"/"+name], tt.fcs[dir+"/"+name] = data, fc
			ino++
			es = append(es, chunkstore.Entry{Name: name, Type: chunkstore.TypeRegular, Mode: 0o644, Size: fc.Size,
				Chunks: fc.Chunks, ChunkLists: fc.ChunkLists, Nlink: 1, Ino: ino})
		}
		return es
	}
	// Data first.
	const fan = 32
	type dirSpec struct {
		name    string
		entries []chunkstore.Entry
	}
	var top []dirSpec
	var subs [][]dirSpec
	for d := 0; d < dirs; {
		t := dirSpec{name: fmt.Sprintf("d%03d", len(top))}
		t.entries = fileEntries(t.name)
		d++
		var ss []dirSpec
		for k := 0; k < fan-1 && d < dirs; k++ {
			sd := dirSpec{name: fmt.Sprintf("s%03d", k)}
			sd.entries = fileEntries(t.name + "/" + sd.name)
			ss = append(ss, sd)
			d++
		}
		top, subs = append(top, t), append(subs, ss)
	}
	// Then the trees, bottom-up.
	put := func(es []chunkstore.Entry) chunkstore.ID {
		tr := &chunkstore.Tree{Entries: es}
		tr.Sort()
		id, err := s.PutTree(ctx, tr)
		if err != nil {
			tb.Fatal(err)
		}
		tt.trees = append(tt.trees, id)
		return id
	}
	var rootEntries []chunkstore.Entry
	for i, t := range top {
		es := t.entries
		for _, sd := range subs[i] {
			ino++
			es = append(es, chunkstore.Entry{Name: sd.name, Type: chunkstore.TypeDir, Mode: 0o755, Nlink: 2, Ino: ino, Subtree: put(sd.entries)})
		}
		ino++
		rootEntries = append(rootEntries, chunkstore.Entry{Name: t.name, Type: chunkstore.TypeDir, Mode: 0o755, Nlink: 2, Ino: ino, Subtree: put(es)})
	}
	tt.root = put(rootEntries)
	if err := s.Flush(ctx); err != nil {
		tb.Fatal(err)
	}
	return tt
}

// walkTrees reads every tree under root, breadth first, and returns how
// many it read.
func walkTrees(tb testing.TB, s *chunkstore.Store, root chunkstore.ID) int {
	tb.Helper()
	n := 0
	for level := []chunkstore.ID{root}; len(level) > 0; {
		var next []chunkstore.ID
		for _, id := range level {
			tr, err := s.Tree(ctx, id)
			if err != nil {
				tb.Fatal(err)
			}
			n++
			for _, e := range tr.Entries {
				if e.Type == chunkstore.TypeDir {
					next = append(next, e.Subtree)
				}
			}
		}
		level = next
	}
	return n
}

// readTree reads every file under root and checks its content.
func readTree(tb testing.TB, s *chunkstore.Store, tt *testTree) {
	tb.Helper()
	var walk func(id chunkstore.ID, dir string)
	walk = func(id chunkstore.ID, dir string) {
		tr, err := s.Tree(ctx, id)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range tr.Entries {
			p := strings.TrimPrefix(dir+"/"+e.Name, "/")
			if e.Type == chunkstore.TypeDir {
				walk(e.Subtree, p)
				continue
			}
			f, err := s.OpenFile(ctx, chunkstore.FileContent{Size: e.Size, Chunks: e.Chunks, ChunkLists: e.ChunkLists})
			if err != nil {
				tb.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := f.WriteTo(&buf); err != nil {
				tb.Fatalf("read %s: %v", p, err)
			}
			if want, ok := tt.files[p]; ok && !bytes.Equal(buf.Bytes(), want) {
				tb.Fatalf("%s: content differs", p)
			}
		}
	}
	walk(tt.root, "")
}

func TestCache_SecondReadIsAHit(t *testing.T) {
	f, _ := remoteBackend(t)
	cache := t.TempDir()
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{CacheDir: cache})
	data := textData(1, 20000)
	id, _, err := s.PutBlob(ctx, chunkstore.KindData, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, f, chunkstore.Options{CacheDir: cache})
	for i, want := range []int{1, 0, 0} { // a one-blob pack has no neighbours: no trailer fetched
		var got []byte
		if n := packGets(f, func() { got, err = s2.Blob(ctx, id) }); n != want || err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d: %d GETs (want %d), err %v, data equal %v", i, n, want, err, bytes.Equal(got, data))
		}
	}
	st := s2.Stats()
	if st.CacheHits != 2 || st.CacheMisses != 1 || st.Gets != 1 || st.CacheBlobs != 1 || st.CacheBytes != 20480 || st.CacheLimit != chunkstore.DefaultCacheSize {
		t.Fatalf("stats: %+v", st)
	}
	if st.FetchedBytes == 0 || st.FetchedBytes >= uint64(len(data)) { // compressed
		t.Fatalf("fetched %d bytes for a %d-byte text blob", st.FetchedBytes, len(data))
	}
	files, _ := filepath.Glob(filepath.Join(cache, s2.Config().ID, "blobs", "*", "*"))
	if len(files) != 1 || filepath.Base(files[0]) != id.String() {
		t.Fatalf("cache files: %v", files)
	}
}

// A snapshot's trees, written together, are read with a few GETs, not one
// per directory.
func TestCache_TreeWalkCoalesced(t *testing.T) {
	f, _ := remoteBackend(t)
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{})
	tt := writeTree(t, s, 1000, 2, func(i int) int { return 1000 + i%3000 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cold := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir()})
	var n int
	gets := packGets(f, func() { n = walkTrees(t, cold, tt.root) })
	if n != 1001 {
		t.Fatalf("walked %d trees, want 1001", n)
	}
	t.Logf("walk of %d trees on an empty cache: %d GETs (trailer included)", n, gets)
	if gets > 4 {
		t.Fatalf("walk of %d trees written by one flush cost %d GETs; want a few (coalesced)", n, gets)
	}
	// Without a cache there is nowhere to keep neighbours: one GET a tree.
	nocache := reopen(t, f, chunkstore.Options{})
	if gets := packGets(f, func() { walkTrees(t, nocache, tt.root) }); gets != 1001 {
		t.Fatalf("walk without a cache: %d GETs, want 1001", gets)
	}
	// Again with the cache: no GET at all.
	if gets := packGets(f, func() { walkTrees(t, cold, tt.root) }); gets != 0 {
		t.Fatalf("second walk: %d GETs, want 0", gets)
	}
	// The files, then: neighbouring data chunks come with each GET too.
	gets = packGets(f, func() { readTree(t, cold, tt) })
	t.Logf("reading %d files after the walk: %d GETs", len(tt.files), gets)
	if gets > len(tt.files)/20 {
		t.Fatalf("reading %d small files cost %d GETs; want coalescing", len(tt.files), gets)
	}
}

func TestCache_SurvivesReopen(t *testing.T) {
	f, _ := remoteBackend(t)
	cache := t.TempDir()
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{PackSize: 1 << 20}, chunkstore.Options{})
	tt := writeTree(t, s, 50, 4, func(i int) int { return 5000 + 20000*(i%5) })
	s.Close()

	s1 := reopen(t, f, chunkstore.Options{CacheDir: cache})
	readTree(t, s1, tt)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, f, chunkstore.Options{CacheDir: cache})
	if gets := packGets(f, func() { readTree(t, s2, tt) }); gets != 0 {
		t.Fatalf("reading the tree after a restart cost %d GETs, want 0", gets)
	}
	chunkstore.WaitCacheScan(s2)
	st, st1 := s2.Stats(), s1.Stats()
	if st.CacheBlobs != st1.CacheBlobs || st.CacheBytes != st1.CacheBytes || st.CacheMisses != 0 {
		t.Fatalf("after reopen: %d blobs, %d bytes, %d misses; before: %d blobs, %d bytes", st.CacheBlobs, st.CacheBytes, st.CacheMisses, st1.CacheBlobs, st1.CacheBytes)
	}
}

func TestCache_CorruptCacheFile(t *testing.T) {
	f, _ := remoteBackend(t)
	cache := t.TempDir()
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{CacheDir: cache})
	data := randData(3, 50000)
	id, _, err := s.PutBlob(ctx, chunkstore.KindData, data)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := reopen(t, f, chunkstore.Options{CacheDir: cache})
	if _, err := s2.Blob(ctx, id); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(cache, s2.Config().ID, "blobs", id.String()[:2], id.String())
	for name, damage := range map[string]func(){
		"FlippedByte": func() {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x40
			os.WriteFile(p, b, 0o600)
		},
		"Truncated": func() { os.Truncate(p, 1000) },
		"Replaced":  func() { os.WriteFile(p, randData(4, 50000), 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			damage()
			dropped := s2.Stats().CacheDropped
			var got []byte
			if n := packGets(f, func() { got, err = s2.Blob(ctx, id) }); n != 1 || err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read of a damaged cache file: %d GETs (want 1), err %v, right data %v", n, err, bytes.Equal(got, data))
			}
			if s2.Stats().CacheDropped != dropped+1 {
				t.Fatal("the damaged file was not counted as dropped")
			}
			if b, _ := os.ReadFile(p); !bytes.Equal(b, data) {
				t.Fatal("the cache file was not replaced by the blob fetched again")
			}
		})
	}
}

// Damage in the backend is still ErrCorrupt naming the blob and its pack,
// with the cache and coalescing in front; a damaged neighbour does not stop
// a good blob from being read.
func TestCache_CorruptPack(t *testing.T) {
	setup := func(t *testing.T) (*chunkstoretest.Faulty, []chunkstore.ID, string) {
		f, dir := remoteBackend(t)
		s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{})
		var ids []chunkstore.ID
		for i := range 3 {
			id, err := s.PutTree(ctx, &chunkstore.Tree{Entries: []chunkstore.Entry{
				{Name: fmt.Sprintf("f%d", i), Type: chunkstore.TypeRegular, Mode: 0o644, Nlink: 1, Ino: 2, Size: 1000, Inline: randData(uint64(i), 1000)},
			}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return f, ids, packFiles(t, dir)[0]
	}
	t.Run("FlippedByte", func(t *testing.T) {
		f, ids, pack := setup(t)
		raw, _ := os.ReadFile(pack)
		raw[8+500] ^= 1 // inside the first blob
		os.WriteFile(pack, raw, 0o600)
		s := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir()})
		if _, err := s.Tree(ctx, ids[1]); err != nil { // brings its damaged neighbour's bytes too
			t.Fatalf("a good blob next to a damaged one: %v", err)
		}
		for range 2 { // never cached, so the same error every time
			_, err := s.Tree(ctx, ids[0])
			if !errors.Is(err, chunkstore.ErrCorrupt) || !strings.Contains(err.Error(), ids[0].String()) || !strings.Contains(err.Error(), filepath.Base(pack)) {
				t.Fatalf("err = %v, want ErrCorrupt naming blob %s and pack %s", err, ids[0].Short(), filepath.Base(pack))
			}
		}
		if _, err := s.Tree(ctx, ids[2]); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("DamagedTrailer", func(t *testing.T) {
		f, ids, pack := setup(t)
		raw, _ := os.ReadFile(pack)
		raw[len(raw)-20] ^= 1
		os.WriteFile(pack, raw, 0o600)
		s := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir()})
		for _, id := range ids { // the blobs themselves are intact: read one by one
			if _, err := s.Tree(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("Truncated", func(t *testing.T) {
		f, ids, pack := setup(t)
		os.Truncate(pack, 50)
		s := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir()})
		_, err := s.Tree(ctx, ids[2])
		if !errors.Is(err, chunkstore.ErrCorrupt) || !strings.Contains(err.Error(), ids[2].String()) || !strings.Contains(err.Error(), filepath.Base(pack)) {
			t.Fatalf("err = %v, want ErrCorrupt naming blob and pack", err)
		}
	})
	t.Run("Missing", func(t *testing.T) {
		f, ids, pack := setup(t)
		os.Remove(pack)
		s := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir()})
		if _, err := s.Tree(ctx, ids[0]); !errors.Is(err, chunkstore.ErrCorrupt) || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("err = %v, want ErrCorrupt saying the pack is missing", err)
		}
	})
}

// Eviction keeps the cache within its size through a store's reads, and
// never evicts pinned blobs.
func TestCache_EvictionAndPins(t *testing.T) {
	f, _ := remoteBackend(t)
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{})
	var ids []chunkstore.ID
	var datas [][]byte
	for i := range 200 {
		data := randData(uint64(i), 10000+i) // 3 blocks each
		id, _, err := s.PutBlob(ctx, chunkstore.KindData, data)
		if err != nil {
			t.Fatal(err)
		}
		ids, datas = append(ids, id), append(datas, data)
	}
	s.Close()
	const limit = 60 * 3 * 4096
	s2 := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir(), CacheSize: limit})
	pinned := ids[10:20]
	s2.Pin(pinned)
	for round := range 3 {
		for i, id := range ids {
			got, err := s2.Blob(ctx, id)
			if err != nil || !bytes.Equal(got, datas[i]) {
				t.Fatalf("round %d, blob %d: %v", round, i, err)
			}
			if st := s2.Stats(); st.CacheBytes > limit {
				t.Fatalf("cache holds %d bytes, limit %d", st.CacheBytes, limit)
			}
		}
		chunkstore.WaitFetches(s2) // neighbours are cached in the background
	}
	st := s2.Stats()
	if st.CacheEvicted == 0 || st.CacheBytes < limit/2 {
		t.Fatalf("stats after churn: %+v", st)
	}
	if gets := packGets(f, func() {
		for _, id := range pinned {
			if _, err := s2.Blob(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}); gets != 0 {
		t.Fatalf("reading pinned blobs after churn cost %d GETs, want 0", gets)
	}
	s2.Unpin(pinned)
	for _, id := range ids[100:] {
		s2.Blob(ctx, id)
	}
	chunkstore.WaitFetches(s2)
	if gets := packGets(f, func() { s2.Blob(ctx, pinned[0]) }); gets == 0 {
		t.Fatal("an unpinned blob survived a cache's worth of newer reads")
	}
}

// A file read in order is fetched ahead with a few large GETs.
func TestCache_ReadAhead(t *testing.T) {
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			f, _ := remoteBackend(t)
			s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{})
			size := 24 << 20 // ~750 chunks of ~32 KiB, in two or three packs
			if testing.Short() {
				size = 12 << 20
			}
			data := randData(9, size)
			fc, err := s.PutFile(ctx, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			opts := chunkstore.Options{}
			if cached {
				opts.CacheDir = t.TempDir()
			}
			s2 := reopen(t, f, opts)
			var got []byte
			gets := packGets(f, func() { got = readAll(t, s2, fc) })
			if !bytes.Equal(got, data) {
				t.Fatal("content differs")
			}
			t.Logf("sequential read of %d MiB: %d GETs", len(data)>>20, gets)
			if gets > 32 { // ~750 chunks
				t.Fatalf("sequential read cost %d GETs; want read-ahead in a few large GETs", gets)
			}
			// Random reads are right too.
			r, err := s2.OpenFile(ctx, fc)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			for range 200 {
				off := rng.Int64N(int64(len(data)))
				p := make([]byte, rng.IntN(200000))
				n, err := r.ReadAt(p, off)
				if err != nil && err != io.EOF || !bytes.Equal(p[:n], data[off:off+int64(n)]) {
					t.Fatalf("ReadAt(%d, %d): %d, %v", len(p), off, n, err)
				}
			}
		})
	}
}

func TestCache_Prefetch(t *testing.T) {
	f, _ := remoteBackend(t)
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{})
	var ids []chunkstore.ID
	for i := range 2000 {
		id, _, err := s.PutBlob(ctx, chunkstore.KindData, textData(uint64(i), 3000))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	s.Close()
	s2 := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir()})
	odd := make([]chunkstore.ID, 0, 1000)
	for i := 1; i < len(ids); i += 2 {
		odd = append(odd, ids[i])
	}
	gets := packGets(f, func() {
		if err := s2.Prefetch(ctx, odd); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("prefetch of 1000 of 2000 blobs: %d GETs", gets)
	if gets > 5 {
		t.Fatalf("prefetch of 1000 blobs cost %d GETs", gets)
	}
	if gets := packGets(f, func() {
		for _, id := range odd {
			if _, err := s2.Blob(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}); gets != 0 {
		t.Fatalf("reads after prefetch: %d GETs, want 0", gets)
	}
	if gets := packGets(f, func() { s2.Prefetch(ctx, odd) }); gets != 0 {
		t.Fatalf("prefetch of cached blobs: %d GETs, want 0", gets)
	}
	var unknown chunkstore.ID
	unknown[0] = 1
	if err := s2.Prefetch(ctx, append(ids[:4:4], unknown)); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Fatalf("prefetch of an unknown ID: err = %v, want ErrNotFound", err)
	}
}

func TestCache_Warmup(t *testing.T) {
	f, _ := remoteBackend(t)
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{})
	// 200 directories of small files plus big files with chunk lists.
	tt := writeTree(t, s, 200, 5, func(i int) int {
		if i%300 == 7 {
			return 3 << 20
		}
		return 2000 + i%5000
	})
	s.Close()

	cache := t.TempDir()
	s2 := reopen(t, f, chunkstore.Options{CacheDir: cache})
	var calls int
	var done, total uint64
	gets := packGets(f, func() {
		if err := s2.Warmup(ctx, tt.root, func(d, tot uint64) { calls, done, total = calls+1, d, tot }); err != nil {
			t.Fatal(err)
		}
	})
	var want uint64
	for _, d := range tt.files {
		want += uint64(len(d))
	}
	t.Logf("warm-up of %d files (%d MiB): %d GETs, %d progress calls, done %d of %d", len(tt.files), want>>20, gets, calls, done, total)
	if done != total || total < want || calls < 3 {
		t.Fatalf("progress: %d calls, done %d, total %d; want done = total >= %d", calls, done, total, want)
	}
	if gets > 40 {
		t.Fatalf("warm-up cost %d GETs", gets)
	}
	if gets := packGets(f, func() { readTree(t, s2, tt) }); gets != 0 {
		t.Fatalf("reading the warmed tree cost %d GETs, want 0", gets)
	}

	// A cache too small for the data: trees first, then what fits, and an
	// error saying so.
	small := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir(), CacheSize: 4 << 20})
	err := small.Warmup(ctx, tt.root, nil)
	if !errors.Is(err, chunkstore.ErrInvalid) || !strings.Contains(err.Error(), "cache") {
		t.Fatalf("warm-up larger than the cache: err = %v, want ErrInvalid about the cache", err)
	}
	if gets := packGets(f, func() { walkTrees(t, small, tt.root) }); gets != 0 {
		t.Fatalf("trees after a partial warm-up: %d GETs, want 0", gets)
	}
	if st := small.Stats(); st.CacheBytes > 4<<20 {
		t.Fatalf("partial warm-up overfilled the cache: %d bytes", st.CacheBytes)
	}
}

// Many readers at once, a cache small enough to evict, read-ahead and
// prefetch together: every read is right (run with -race).
func TestCache_Concurrent(t *testing.T) {
	f, _ := remoteBackend(t)
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{PackSize: 1 << 20}, chunkstore.Options{})
	tt := writeTree(t, s, 40, 5, func(i int) int { return 1000 + (i*7919)%200000 })
	s.Close()
	s2 := reopen(t, f, chunkstore.Options{CacheDir: t.TempDir(), CacheSize: 8 << 20, ReadAhead: 1 << 20})
	var paths []string
	for p := range tt.files {
		paths = append(paths, p)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 60 {
				p := paths[rng.IntN(len(paths))]
				fc, want := tt.fcs[p], tt.files[p]
				r, err := s2.OpenFile(ctx, fc)
				if err != nil {
					errs <- err
					return
				}
				got := make([]byte, len(want))
				if rng.IntN(2) == 0 {
					_, err = r.ReadAt(got, 0)
				} else {
					var buf bytes.Buffer
					_, err = r.WriteTo(&buf)
					got = buf.Bytes()
				}
				if err != nil && err != io.EOF || !bytes.Equal(got, want) {
					errs <- fmt.Errorf("%s: %v, content equal %v", p, err, bytes.Equal(got, want))
					return
				}
			}
		})
	}
	wg.Go(func() {
		if err := s2.Warmup(ctx, tt.root, nil); err != nil && !errors.Is(err, chunkstore.ErrInvalid) {
			errs <- err
		}
	})
	wg.Go(func() {
		for range 5 {
			walkTrees(t, s2, tt.root)
			s2.Pin(tt.trees)
			s2.Unpin(tt.trees)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := s2.Stats(); st.CacheBytes > 8<<20 {
		t.Fatalf("cache holds %d bytes, limit 8 MiB", st.CacheBytes)
	}
}

// Local backends have no blob cache: reads go to the pack files, one
// read each, and Prefetch and Warmup have nothing to do.
func TestCache_LocalBackend(t *testing.T) {
	be := chunkstoretest.LocalBackend(t)
	f := chunkstoretest.NewFaulty(be)
	cache := t.TempDir()
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, chunkstore.Options{CacheDir: cache})
	tt := writeTree(t, s, 10, 2, func(i int) int { return 5000 })
	if gets := packGets(f, func() {
		if err := s.Warmup(ctx, tt.root, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Prefetch(ctx, tt.trees); err != nil {
			t.Fatal(err)
		}
	}); gets != 0 {
		t.Fatalf("warm-up of a local store: %d GETs", gets)
	}
	readTree(t, s, tt)
	st := s.Stats()
	if st.CacheLimit != 0 || st.CacheBlobs != 0 || st.Gets == 0 {
		t.Fatalf("local store stats: %+v", st)
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "*", "blobs")); len(m) != 0 {
		t.Fatalf("a local store made a blob cache: %v", m)
	}
	// A remote store without a cache directory cannot be warmed.
	f.Remote = true
	s2 := reopen(t, f, chunkstore.Options{})
	if err := s2.Warmup(ctx, tt.root, nil); !errors.Is(err, chunkstore.ErrInvalid) {
		t.Fatalf("warm-up without a cache: err = %v, want ErrInvalid", err)
	}
	readTree(t, s2, tt)
}

// The trees a store writes go to its blob cache as they are written: the
// next snapshot starts from them, and reads them with no GET, even with the
// remote down. File data does not (the journal has it).
func TestCache_WrittenTreesCached(t *testing.T) {
	f, _ := remoteBackend(t)
	cache := t.TempDir()
	opts := chunkstore.Options{CacheDir: cache}
	s := chunkstoretest.NewStore(t, f, chunkstore.InitOptions{}, opts)
	tt := writeTree(t, s, 4, 3, func(i int) int { return 100 + i })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, f, opts)
	f.Fail(chunkstoretest.OpGet, "packs/", -1, errors.New("the remote is down"))
	for _, id := range tt.trees {
		if _, err := s2.Tree(ctx, id); err != nil {
			t.Fatalf("tree %s written here, read with the remote down: %v", id.Short(), err)
		}
	}
	for path, fc := range tt.fcs {
		if len(fc.Chunks) == 0 {
			continue
		}
		if _, err := s2.Blob(ctx, fc.Chunks[0].ID); err == nil {
			t.Errorf("file data of %s was cached at write: the cache would hold a second copy of the journal's", path)
		}
		break
	}
}
