package chunkstore

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func testCacheID(h *Hasher, data []byte) ID { return h.Sum(data) }

// testCacheBlob is blob i: one cache block (4 KiB) of content.
func testCacheBlob(i int) []byte {
	b := make([]byte, 100)
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

func openTestCache(tb testing.TB, dir string, limit int64) *blobCache {
	tb.Helper()
	c, err := openBlobCache(dir, "store", limit, NewHasher(Key{7}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.close)
	<-c.scanned
	return c
}

// The table against a map: random inserts and removals, with growth, and
// lookups after each step's removals (backward-shift deletion must keep
// every probe run reachable).
func TestCacheTable(t *testing.T) {
	h := NewHasher(Key{1})
	r := rand.New(rand.NewPCG(1, 2))
	var tab cacheTable
	ents := make([]cacheEnt, 1)
	model := map[ID]int32{}
	id := func(i int) ID {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(i))
		return h.Sum(b[:])
	}
	for step := range 50_000 {
		k := id(r.IntN(5000))
		if e, ok := model[k]; ok && r.IntN(2) == 0 {
			tab.remove(ents, k)
			ents[e].id = ID{}
			delete(model, k)
		} else if !ok {
			ents = append(ents, cacheEnt{id: k})
			e := int32(len(ents) - 1)
			tab.insert(ents, e)
			model[k] = e
		}
		if step%5000 == 0 || step == 49_999 {
			if tab.n != len(model) {
				t.Fatalf("step %d: table holds %d, model %d", step, tab.n, len(model))
			}
			for i := range 5000 {
				k := id(i)
				if got, want := tab.find(ents, k), model[k]; got != want {
					t.Fatalf("step %d: find(%d) = %d, want %d", step, i, got, want)
				}
			}
		}
	}
}

func TestBlobCache_LRU(t *testing.T) {
	c := openTestCache(t, t.TempDir(), 10*cacheBlock)
	ids := make([]ID, 30)
	for i := range ids {
		ids[i] = testCacheID(c.hasher, testCacheBlob(i))
	}
	c.pin(ids[:2]) // pinned before they are cached: kept all the same
	for i := range 10 {
		c.put(ids[i], testCacheBlob(i))
	}
	if _, ok := c.get(ids[2]); !ok { // 2 is now the most recent
		t.Fatal("blob 2 not cached")
	}
	for i := 10; i < 14; i++ {
		c.put(ids[i], testCacheBlob(i))
	}
	st := c.stats()
	if st.bytes > c.limit || st.blobs != 10 || st.evicted != 4 {
		t.Fatalf("stats %+v, want 10 blobs within the limit of %d bytes, 4 evicted", st, c.limit)
	}
	// Evicted: the least recently used unpinned ones, 3, 4, 5 and 6.
	for i := range 14 {
		_, err := os.Stat(c.path(ids[i]))
		if evicted := i >= 3 && i <= 6; evicted != os.IsNotExist(err) {
			t.Errorf("blob %d: evicted = %v, want %v", i, os.IsNotExist(err), evicted)
		}
	}
	// Pinned blobs survive any churn, and are evicted once unpinned.
	for i := 14; i < 30; i++ {
		c.put(ids[i], testCacheBlob(i))
	}
	for i := range 2 {
		if data, ok := c.get(ids[i]); !ok || string(data) != string(testCacheBlob(i)) {
			t.Fatalf("pinned blob %d was evicted", i)
		}
	}
	c.pin(ids[:1]) // twice
	c.unpin(ids[:2])
	c.unpin(ids[5:6]) // never pinned: nothing happens
	for i := 30; i < 40; i++ {
		c.put(testCacheID(c.hasher, testCacheBlob(i)), testCacheBlob(i))
	}
	if !c.has(ids[0]) || c.has(ids[1]) {
		t.Fatalf("after unpin: blob 0 (pinned twice, unpinned once) cached = %v, blob 1 (unpinned) cached = %v; want true, false", c.has(ids[0]), c.has(ids[1]))
	}
	if st := c.stats(); st.bytes > c.limit {
		t.Fatalf("cache holds %d bytes, limit %d", st.bytes, c.limit)
	}
	// Pinned blobs are kept even beyond the limit; nothing else is.
	var many []ID
	for i := 100; i < 120; i++ {
		many = append(many, testCacheID(c.hasher, testCacheBlob(i)))
	}
	c.pin(many)
	for i := 100; i < 120; i++ {
		c.put(many[i-100], testCacheBlob(i))
	}
	if st := c.stats(); st.blobs != 21 { // blob 0 and the 20
		t.Fatalf("with 20 pinned blobs over a limit of 10: %d cached, want 21", st.blobs)
	}
	c.unpin(many)
	if st := c.stats(); st.bytes > c.limit {
		t.Fatalf("after unpin: %d bytes, limit %d", st.bytes, c.limit)
	}
}

// Recency survives a restart through the files' mtimes.
func TestBlobCache_Reopen(t *testing.T) {
	dir := t.TempDir()
	c, err := openBlobCache(dir, "store", 100*cacheBlock, NewHasher(Key{7}))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]ID, 8)
	base := time.Now().Add(-time.Hour)
	for i := range ids {
		ids[i] = testCacheID(c.hasher, testCacheBlob(i))
		c.put(ids[i], testCacheBlob(i))
		// Used in the order 7, 6, ..., 0: 7 is the oldest.
		when := base.Add(time.Duration(8-i) * time.Minute)
		os.Chtimes(c.path(ids[i]), when, when)
	}
	// Leftovers of a crash: a stale temporary file, a file of another name.
	stale := filepath.Join(c.dir, ".tmp-123")
	os.WriteFile(stale, []byte("x"), 0o600)
	old := time.Now().Add(-2 * cacheTmpAge)
	os.Chtimes(stale, old, old)
	os.WriteFile(filepath.Join(c.dir, "00", "not-an-id"), []byte("x"), 0o600)
	c.close()

	c2 := openTestCache(t, dir, 5*cacheBlock)
	if st := c2.stats(); st.blobs != 5 || st.evicted != 3 {
		t.Fatalf("reopened with a smaller limit: %+v, want 5 blobs, 3 evicted", st)
	}
	for i, id := range ids {
		if got, want := c2.has(id), i < 5; got != want {
			t.Errorf("blob %d cached = %v, want %v (the oldest go first)", i, got, want)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary file not removed: %v", err)
	}
	// A hit moves the file's mtime forward, so the order survives the next
	// restart too.
	if _, ok := c2.get(ids[4]); !ok {
		t.Fatal("blob 4 not cached")
	}
	if info, err := os.Stat(c2.path(ids[4])); err != nil || time.Since(info.ModTime()) > time.Minute {
		t.Fatalf("mtime after a hit: %v, %v", info.ModTime(), err)
	}
}

func TestBlobCache_Corrupt(t *testing.T) {
	c := openTestCache(t, t.TempDir(), 100*cacheBlock)
	id := testCacheID(c.hasher, testCacheBlob(1))
	c.put(id, testCacheBlob(1))
	for name, damage := range map[string]func(p string){
		"FlippedByte": func(p string) {
			b, _ := os.ReadFile(p)
			b[3] ^= 1
			os.WriteFile(p, b, 0o600)
		},
		"Truncated": func(p string) { os.Truncate(p, 10) },
		"Empty":     func(p string) { os.Truncate(p, 0) },
		"Missing":   func(p string) { os.Remove(p) },
	} {
		t.Run(name, func(t *testing.T) {
			c.put(id, testCacheBlob(1))
			damage(c.path(id))
			before := c.stats().dropped
			if data, ok := c.get(id); ok {
				t.Fatalf("damaged cache file returned %q", data)
			}
			if c.has(id) {
				t.Fatal("damaged file still in the table")
			}
			if _, err := os.Stat(c.path(id)); !os.IsNotExist(err) {
				t.Fatalf("damaged file not removed: %v", err)
			}
			if got := c.stats().dropped - before; got != 1 {
				t.Fatalf("dropped %d, want 1", got)
			}
		})
	}
	// A file another process put (unknown to this one) is found and counted.
	other := testCacheID(c.hasher, testCacheBlob(2))
	os.MkdirAll(filepath.Dir(c.path(other)), 0o700)
	os.WriteFile(c.path(other), testCacheBlob(2), 0o600)
	if _, ok := c.get(other); !ok || !c.has(other) {
		t.Fatal("a valid file unknown to the table was not used")
	}
}

// BenchmarkBlobCacheScan measures the scan at open that rebuilds the LRU
// order of a cache of 50k files (it runs in the background; reads and
// inserts work meanwhile).
func BenchmarkBlobCacheScan(b *testing.B) {
	dir := b.TempDir()
	c, err := openBlobCache(dir, "store", 1<<40, NewHasher(Key{7}))
	if err != nil {
		b.Fatal(err)
	}
	const n = 50_000
	for i := range n {
		c.put(testCacheID(c.hasher, testCacheBlob(i)), testCacheBlob(i))
	}
	c.close()
	for b.Loop() {
		c, err := openBlobCache(dir, "store", 1<<40, NewHasher(Key{7}))
		if err != nil {
			b.Fatal(err)
		}
		<-c.scanned
		if st := c.stats(); st.blobs != n {
			b.Fatalf("scan found %d files, want %d", st.blobs, n)
		}
		c.close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/file")
}
