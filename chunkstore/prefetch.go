package chunkstore

import (
	"context"
	"fmt"
	"sync"
)

// Pin keeps the blobs ids in the local blob cache: eviction passes over
// them until as many Unpin calls. Pinning does not fetch (Prefetch does),
// and IDs need not be cached yet: a pinned blob fetched later stays. Pinned
// blobs count towards the cache's size, and are kept even beyond it. Pins
// live in this process only. Without a blob cache (local backends) it does
// nothing.
func (s *Store) Pin(ids []ID) {
	if s.rd.cache != nil {
		s.rd.cache.pin(ids)
	}
}

// Unpin undoes one Pin of each of ids; unpinned blobs are evicted as any
// other, most recently used first. Unpinning an ID that is not pinned does
// nothing.
func (s *Store) Unpin(ids []ID) {
	if s.rd.cache != nil {
		s.rd.cache.unpin(ids)
	}
}

// Prefetch fetches the blobs ids into the local blob cache, with coalesced
// GETs (blobs of one pack close together in one GET), Options.Fetches at
// once. Blobs already cached, pending or being fetched are skipped. It
// returns when every blob is cached or has failed; the error names the
// first failure (ErrCorrupt for damaged data, ErrNotFound for IDs the store
// does not have). Without a blob cache (local backends, or no CacheDir) it
// does nothing.
func (s *Store) Prefetch(ctx context.Context, ids []ID) error {
	if s.rd.cache == nil {
		return nil
	}
	return s.fetchIDs(ctx, ids, nil)
}

// warmBatch is how many blobs Warmup asks for at once: enough for many
// parallel GETs, few enough to report progress often.
const warmBatch = 4096

// Warmup fetches everything a tree holds into the local blob cache: trees
// first, level by level, then chunk lists, then file data, each with
// Prefetch's coalesced, parallel GETs. progress, if not nil, is called after
// each batch with the plaintext bytes done and the total found so far (the
// total grows while trees are walked). Data that does not fit in the cache
// is not fetched: Warmup then stops after what fits and returns an error
// wrapping ErrInvalid that says so. A local backend needs no warm-up (it
// returns nil); a remote store without a blob cache is ErrInvalid.
func (s *Store) Warmup(ctx context.Context, root ID, progress func(done, total uint64)) error {
	f := s.rd
	if !f.remote {
		return nil
	}
	if f.cache == nil {
		return fmt.Errorf("%w: the store at %s has no local blob cache to warm (set a cache directory, and a cache size that is not negative)", ErrInvalid, s.be.Properties().Location)
	}
	w := &warmer{s: s, seen: make(map[ID]bool), progress: progress}
	// Trees, breadth first: each level's trees in a few coalesced GETs,
	// decoded as they arrive.
	level := []ID{root}
	w.add(root, true)
	for len(level) > 0 {
		var next []ID
		for len(level) > 0 {
			batch := level[:min(len(level), warmBatch)]
			level = level[len(batch):]
			var mu sync.Mutex
			got := make(map[ID][]byte, len(batch))
			if err := s.fetchIDs(ctx, batch, func(id ID, data []byte) {
				mu.Lock()
				got[id] = data
				mu.Unlock()
			}); err != nil {
				return fmt.Errorf("warm up tree %s: %w", root.Short(), err)
			}
			for _, id := range batch {
				var t *Tree
				var err error
				if data, ok := got[id]; ok {
					if _, loc, _ := s.idx.lookup(id); loc.kind != KindTree {
						err = fmt.Errorf("%w: blob %s is a %s blob, not a tree", ErrCorrupt, id.Short(), loc.kind)
					} else if t, err = DecodeTree(data); err != nil {
						err = fmt.Errorf("tree %s: %w", id.Short(), err)
					}
				} else { // cached already, or fetched by another reader
					t, err = s.Tree(ctx, id)
				}
				if err != nil {
					return fmt.Errorf("warm up tree %s: %w", root.Short(), err)
				}
				for i := range t.Entries {
					e := &t.Entries[i]
					if !e.Subtree.IsZero() && w.add(e.Subtree, true) {
						next = append(next, e.Subtree)
					}
					for _, l := range e.ChunkLists {
						if w.add(l.ID, true) {
							w.lists = append(w.lists, l.ID)
						}
					}
					for _, c := range e.Chunks {
						if !c.IsHole() && w.add(c.ID, false) {
							w.data = append(w.data, c.ID)
						}
					}
				}
			}
			w.done(batch)
		}
		level = next
	}
	// Chunk lists, then what they list.
	for len(w.lists) > 0 {
		batch := w.lists[:min(len(w.lists), warmBatch)]
		w.lists = w.lists[len(batch):]
		if err := s.Prefetch(ctx, batch); err != nil {
			return fmt.Errorf("warm up tree %s: %w", root.Short(), err)
		}
		for _, id := range batch {
			data, err := s.Blob(ctx, id)
			if err != nil {
				return fmt.Errorf("warm up tree %s: %w", root.Short(), err)
			}
			cl, err := DecodeChunkList(data)
			if err != nil {
				return fmt.Errorf("warm up tree %s: chunk list %s: %w", root.Short(), id.Short(), err)
			}
			for _, c := range cl.Chunks {
				if !c.IsHole() && w.add(c.ID, false) {
					w.data = append(w.data, c.ID)
				}
			}
		}
		w.done(batch)
	}
	// File data, as far as the cache holds it.
	budget := f.cache.limit - w.meta
	data := w.data
	for i, id := range data {
		_, loc, _ := s.idx.lookup(id)
		if budget -= int64(cacheBlocks(int64(loc.raw))) * cacheBlock; budget < 0 {
			data = data[:i]
			break
		}
	}
	for len(data) > 0 {
		batch := data[:min(len(data), warmBatch)]
		data = data[len(batch):]
		if err := s.Prefetch(ctx, batch); err != nil {
			return fmt.Errorf("warm up tree %s: %w", root.Short(), err)
		}
		w.done(batch)
	}
	if w.doneBytes < w.total {
		return fmt.Errorf("%w: tree %s holds %d MiB, more than the local cache's %d MiB: warmed its trees and the first %d MiB; raise the cache size or warm a smaller tree", ErrInvalid, root.Short(), w.total>>20, f.cache.limit>>20, w.doneBytes>>20)
	}
	return nil
}

// warmer is Warmup's bookkeeping: blobs seen, bytes found and done.
type warmer struct {
	s           *Store
	seen        map[ID]bool
	lists, data []ID
	total       uint64 // plaintext bytes of the blobs seen
	doneBytes   uint64 // ... and of those fetched
	meta        int64  // cache bytes of the trees and chunk lists seen
	progress    func(done, total uint64)
}

// add reports whether id is new, and counts its size in the total (and in
// meta, for trees and chunk lists).
func (w *warmer) add(id ID, meta bool) bool {
	if w.seen[id] {
		return false
	}
	w.seen[id] = true
	if _, loc, ok := w.s.idx.lookup(id); ok {
		w.total += uint64(loc.raw)
		if meta {
			w.meta += int64(cacheBlocks(int64(loc.raw))) * cacheBlock
		}
	}
	return true
}

func (w *warmer) done(ids []ID) {
	for _, id := range ids {
		if _, loc, ok := w.s.idx.lookup(id); ok {
			w.doneBytes += uint64(loc.raw)
		}
	}
	if w.progress != nil {
		w.progress(w.doneBytes, w.total)
	}
}
