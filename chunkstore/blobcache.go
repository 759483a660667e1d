package chunkstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultCacheSize is the blob cache's limit when Options.CacheDir is set and
// Options.CacheSize is 0.
const DefaultCacheSize int64 = 10 << 30

const (
	// cacheBlock is the unit cache files are accounted in: what a small
	// file really costs on disk, so the limit bounds the disk's use.
	cacheBlock = 4096
	// cacheTouchEvery: a hit moves a file's mtime (its recency after a
	// restart) forward at most once in this many seconds.
	cacheTouchEvery = 60
	// cacheTmpAge: temporary files older than this are left over from a
	// crash; younger ones may be another process's insert in progress.
	cacheTmpAge = time.Hour
)

// blobCache keeps verified plaintext of blobs read from a remote backend on
// local disk, one file per blob named by its ID:
//
//	<CacheDir>/<store ID>/blobs/<first 2 hex digits>/<64 hex digits>
//
// Pack trailers are cached the same way under their pack's ID (a pack is
// named by the keyed hash of its trailer). A file is its content's keyed
// hash, so every read checks the name against the content: a file that was
// damaged, truncated by a crash or replaced is dropped and the blob fetched
// again, never returned.
//
// The cache is bounded by a byte limit (file sizes rounded up to 4 KiB) with
// LRU eviction: an intrusive list over a slice of entries, found through an
// open-addressing table of entry numbers, about 60 bytes of memory per
// cached file. Inserting and evicting are O(1). Pinned IDs are kept out of
// the list, so eviction never sees them. Recency survives a restart as the
// files' mtimes: a hit moves the mtime forward (at most once a minute), and
// at open a background scan of the directory (one stat per file) rebuilds
// the list in mtime order; reads and inserts work meanwhile.
//
// Several processes may share a cache directory (a mount daemon and CLI
// verbs of the same store): each finds the others' files (a read always
// looks on disk) and enforces the limit over the files it knows; a blob one
// pins can be evicted by another, and is then fetched again. Safe for
// concurrent use.
type blobCache struct {
	dir    string
	limit  int64
	hasher *Hasher

	mu      sync.Mutex
	closed  bool
	tab     cacheTable
	ents    []cacheEnt // ents[0] is the sentinel of the LRU list: next is the most recent
	free    int32      // first free entry (linked through next), 0 if none
	bytes   int64      // accounted bytes of all entries
	pins    map[ID]int32
	evicted uint64
	dropped uint64

	stop    chan struct{} // closed by close: the scan gives up
	scanned chan struct{} // closed when the scan has finished
}

// cacheEnt is one cached file: 52 bytes.
type cacheEnt struct {
	id         ID
	blocks     uint32 // size in cacheBlock units, at least 1
	used       uint32 // last use, Unix seconds; the file's mtime
	prev, next int32
	linked     bool // in the LRU list, that is not pinned
}

func openBlobCache(cacheDir, storeID string, limit int64, hasher *Hasher) (*blobCache, error) {
	dir := filepath.Join(cacheDir, storeID, "blobs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create blob cache %s: %w", dir, err)
	}
	c := &blobCache{
		dir: dir, limit: limit, hasher: hasher,
		ents: make([]cacheEnt, 1), pins: make(map[ID]int32),
		stop: make(chan struct{}), scanned: make(chan struct{}),
	}
	go c.scan()
	return c, nil
}

func (c *blobCache) path(id ID) string {
	s := id.String()
	return filepath.Join(c.dir, s[:2], s)
}

func cacheBlocks(n int64) uint32 {
	return uint32(max(1, (n+cacheBlock-1)/cacheBlock))
}

// get returns the cached plaintext of id, verified against the ID. A file
// that does not match is deleted.
func (c *blobCache) get(id ID) ([]byte, bool) {
	data, err := os.ReadFile(c.path(id))
	if err != nil {
		c.forget(id, false) // evicted by another process, or never cached
		return nil, false
	}
	if c.hasher.Sum(data) != id {
		c.forget(id, true)
		return nil, false
	}
	c.used(id, len(data))
	return data, true
}

// has reports whether id is cached: from the table once the scan at open
// has filled it, from the disk until then.
func (c *blobCache) has(id ID) bool {
	c.mu.Lock()
	found := c.tab.find(c.ents, id) != 0
	c.mu.Unlock()
	if found {
		return true
	}
	select {
	case <-c.scanned:
		return false
	default:
		_, err := os.Lstat(c.path(id))
		return err == nil
	}
}

// forget drops id's entry after a failed read: the file was missing, or
// (corrupt) did not match its name and is removed.
func (c *blobCache) forget(id ID, corrupt bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.tab.find(c.ents, id)
	if corrupt {
		os.Remove(c.path(id))
	} else if i != 0 {
		// Missing when read, but a put may have renamed it into place
		// since (under c.mu, so this look is final).
		if _, err := os.Lstat(c.path(id)); err == nil {
			return
		}
	}
	if i != 0 {
		c.drop(i)
	}
	if i != 0 || corrupt {
		c.dropped++
	}
}

// used records a hit: id moves to the front of the list, and its file's
// mtime forward if the last recorded use is older than cacheTouchEvery.
func (c *blobCache) used(id ID, n int) {
	now := uint32(time.Now().Unix())
	touch := false
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if i := c.tab.find(c.ents, id); i != 0 {
		e := &c.ents[i]
		if e.linked {
			c.unlink(i)
			c.linkFront(i)
		}
		if now-e.used >= cacheTouchEvery {
			e.used, touch = now, true
		}
	} else {
		// A file this process did not know yet: written before Open and
		// not scanned yet, or by another process.
		c.add(id, cacheBlocks(int64(n)), now, true)
		c.evictLocked()
		touch = true
	}
	c.mu.Unlock()
	if touch {
		t := time.Unix(int64(now), 0)
		os.Chtimes(c.path(id), t, t)
	}
}

// put caches data, which the caller has verified to be id's plaintext.
// Failures (a full disk) are ignored: the blob is fetched again next time.
func (c *blobCache) put(id ID, data []byte) {
	blocks := cacheBlocks(int64(len(data)))
	if int64(blocks)*cacheBlock > c.limit {
		return // would evict everything else
	}
	c.mu.Lock()
	skip := c.closed || c.cachedLocked(id)
	c.mu.Unlock()
	if skip {
		return
	}
	tmp, err := writeTemp(c.dir, data)
	if err != nil {
		return
	}
	// Rename under the lock, so that the table and the files agree: an
	// eviction in between cannot remove the file just put.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.cachedLocked(id) {
		os.Remove(tmp)
		return
	}
	p := c.path(id)
	err = os.Rename(tmp, p)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.Mkdir(filepath.Dir(p), 0o700); err == nil || errors.Is(err, fs.ErrExist) {
			err = os.Rename(tmp, p)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return
	}
	c.add(id, blocks, uint32(time.Now().Unix()), true)
	c.evictLocked()
}

// cachedLocked reports whether id has an entry whose file exists. An entry
// without its file is dropped: the scan at open may add a file it listed
// just before a failed read removed it. c.mu is held.
func (c *blobCache) cachedLocked(id ID) bool {
	i := c.tab.find(c.ents, id)
	if i == 0 {
		return false
	}
	if _, err := os.Lstat(c.path(id)); err != nil {
		c.drop(i)
		return false
	}
	return true
}

// pin keeps ids out of eviction until as many unpin calls; IDs need not be
// cached yet.
func (c *blobCache) pin(ids []ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.pins[id]++
		if i := c.tab.find(c.ents, id); i != 0 && c.ents[i].linked {
			c.unlink(i)
		}
	}
}

func (c *blobCache) unpin(ids []ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		n, ok := c.pins[id]
		if !ok {
			continue // not pinned: an unbalanced Unpin changes nothing
		}
		if n > 1 {
			c.pins[id] = n - 1
			continue
		}
		delete(c.pins, id)
		if i := c.tab.find(c.ents, id); i != 0 && !c.ents[i].linked {
			c.linkFront(i)
		}
	}
	c.evictLocked()
}

// add records a new entry, at the front of the list or (for scanned, older
// files) at the back, unless id is pinned.
func (c *blobCache) add(id ID, blocks, used uint32, front bool) {
	var i int32
	if c.free != 0 {
		i = c.free
		c.free = c.ents[i].next
	} else {
		c.ents = append(c.ents, cacheEnt{})
		i = int32(len(c.ents) - 1)
	}
	c.ents[i] = cacheEnt{id: id, blocks: blocks, used: used}
	c.tab.insert(c.ents, i)
	c.bytes += int64(blocks) * cacheBlock
	switch {
	case c.pins[id] > 0:
	case front:
		c.linkFront(i)
	default:
		c.linkBack(i)
	}
}

// drop forgets entry i (its file is the caller's business).
func (c *blobCache) drop(i int32) {
	if c.ents[i].linked {
		c.unlink(i)
	}
	c.tab.remove(c.ents, c.ents[i].id)
	c.bytes -= int64(c.ents[i].blocks) * cacheBlock
	c.ents[i] = cacheEnt{next: c.free}
	c.free = i
}

// evictLocked removes least recently used files until the cache is within
// its limit or only pinned files are left.
func (c *blobCache) evictLocked() {
	for c.bytes > c.limit {
		i := c.ents[0].prev
		if i == 0 {
			return
		}
		id := c.ents[i].id
		c.drop(i)
		os.Remove(c.path(id))
		c.evicted++
	}
}

func (c *blobCache) linkFront(i int32) {
	head := c.ents[0].next
	c.ents[i].prev, c.ents[i].next, c.ents[i].linked = 0, head, true
	c.ents[head].prev = i
	c.ents[0].next = i
}

func (c *blobCache) linkBack(i int32) {
	tail := c.ents[0].prev
	c.ents[i].prev, c.ents[i].next, c.ents[i].linked = tail, 0, true
	c.ents[tail].next = i
	c.ents[0].prev = i
}

func (c *blobCache) unlink(i int32) {
	e := &c.ents[i]
	c.ents[e.prev].next = e.next
	c.ents[e.next].prev = e.prev
	e.prev, e.next, e.linked = 0, 0, false
}

// scan rebuilds the LRU list from the files on disk, oldest mtime last, and
// removes temporary files left by a crash. It runs in the background from
// open; entries added meanwhile are more recent than anything it finds.
func (c *blobCache) scan() {
	defer close(c.scanned)
	type found struct {
		id     ID
		blocks uint32
		used   uint32
	}
	var files []found
	for i := range 256 {
		select {
		case <-c.stop:
			return
		default:
		}
		sub := fmt.Sprintf("%02x", i)
		entries, err := os.ReadDir(filepath.Join(c.dir, sub))
		if err != nil {
			continue
		}
		for _, de := range entries {
			id, err := ParseID(de.Name())
			if err != nil || id.String() != de.Name() || !strings.HasPrefix(de.Name(), sub) {
				continue // not ours
			}
			info, err := de.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			files = append(files, found{id, cacheBlocks(info.Size()), uint32(info.ModTime().Unix())})
		}
	}
	if entries, err := os.ReadDir(c.dir); err == nil {
		for _, de := range entries {
			if info, err := de.Info(); err == nil && strings.HasPrefix(de.Name(), ".tmp-") && time.Since(info.ModTime()) > cacheTmpAge {
				os.Remove(filepath.Join(c.dir, de.Name()))
			}
		}
	}
	slices.SortFunc(files, func(a, b found) int { return int(int64(b.used) - int64(a.used)) }) // newest first
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for _, f := range files {
		if c.tab.find(c.ents, f.id) == 0 {
			c.add(f.id, f.blocks, f.used, false)
		}
	}
	c.evictLocked()
}

func (c *blobCache) close() {
	close(c.stop)
	<-c.scanned
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// cacheStats is what Store.Stats reports of the cache.
type cacheStats struct {
	blobs            int
	bytes, limit     int64
	evicted, dropped uint64
}

func (c *blobCache) stats() cacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cacheStats{blobs: c.tab.n, bytes: c.bytes, limit: c.limit, evicted: c.evicted, dropped: c.dropped}
}

// cacheTable finds cache entries by ID: open addressing with linear probing
// over entry numbers (0: empty slot), hashed by the ID's first eight bytes
// (IDs are uniformly distributed). Removal shifts later entries back, so no
// tombstones accumulate.
type cacheTable struct {
	slots []int32
	n     int
}

func (t *cacheTable) home(id ID) int {
	hi, _ := bits.Mul64(binary.LittleEndian.Uint64(id[:8]), uint64(len(t.slots)))
	return int(hi)
}

// find returns id's entry number, or 0.
func (t *cacheTable) find(ents []cacheEnt, id ID) int32 {
	if len(t.slots) == 0 {
		return 0
	}
	for i := t.home(id); ; {
		e := t.slots[i]
		if e == 0 || ents[e].id == id {
			return e
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// insert adds entry e, whose ID is not in the table.
func (t *cacheTable) insert(ents []cacheEnt, e int32) {
	if 4*(t.n+1) > 3*len(t.slots) {
		old := t.slots
		t.slots, t.n = make([]int32, max(64, 2*len(old))), 0
		for _, o := range old {
			if o != 0 {
				t.insert(ents, o)
			}
		}
	}
	for i := t.home(ents[e].id); ; {
		if t.slots[i] == 0 {
			t.slots[i] = e
			t.n++
			return
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// remove deletes id's slot and moves back the entries of its probe run that
// would no longer be reachable.
func (t *cacheTable) remove(ents []cacheEnt, id ID) {
	if len(t.slots) == 0 {
		return
	}
	i := t.home(id)
	for {
		e := t.slots[i]
		if e == 0 {
			return
		}
		if ents[e].id == id {
			break
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	t.n--
	for j := i; ; {
		t.slots[i] = 0
		for {
			if j++; j == len(t.slots) {
				j = 0
			}
			e := t.slots[j]
			if e == 0 {
				return
			}
			// The entry at j stays if its home lies cyclically in (i, j].
			k := t.home(ents[e].id)
			if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
				continue
			}
			t.slots[i] = e
			i = j
			break
		}
	}
}
