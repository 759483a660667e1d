package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// Reads from a remote backend. A blob that is neither pending nor cached is
// fetched with one ranged GET that also covers blobs likely needed next:
//
//   - Store.blob (trees, chunk lists, a file's chunk read out of order): the
//     pack's neighbouring blobs of the same kind that the cache does not
//     hold, up to coalesceWindow bytes of pack around the blob, skipping at
//     most coalesceGap bytes between two of them. Trees one snapshot wrote
//     lie together in a pack, so a walk of them costs a GET per megabyte,
//     not one per directory. The pack's trailer (its blob list, in offset
//     order) tells which blobs lie around; it is fetched once per pack,
//     checked against the pack's ID and cached like a blob.
//   - FileReader read sequentially, Prefetch and Warmup: the blobs asked
//     for, grouped by pack and sorted by offset, one GET per run of blobs
//     closer than coalesceGap and at most maxRangeLen long, Options.Fetches
//     GETs at once.
//
// Every blob fetched is verified and cached. A blob being fetched is a
// flight: readers of the same blob wait for it instead of fetching it again.
const (
	coalesceWindow = 1 << 20
	coalesceGap    = 256 << 10
	maxRangeLen    = 4 << 20
	// layoutEntries bounds the decoded pack trailers kept in memory, in
	// entries of 48 bytes: 12 MiB.
	layoutEntries = 1 << 18
	// DefaultFetches is the default of Options.Fetches.
	DefaultFetches = 8
	// DefaultReadAhead is the default of Options.ReadAhead.
	DefaultReadAhead = 8 << 20
)

// fetcher is the state of a store's reads: remote backends get the blob
// cache, flights, pack layouts and read-ahead; local ones only counters.
type fetcher struct {
	remote bool
	cache  *blobCache     // nil: no blob cache
	sem    chan struct{}  // bounds GETs of Prefetch, Warmup and read-ahead
	bg     sync.WaitGroup // background work: read-ahead, cache inserts

	mu      sync.Mutex
	closed  bool
	flights map[ID]*flight
	layouts map[uint32]*layout
	layoutN int    // entries in layouts
	clock   uint64 // for layouts' LRU

	hits, misses, gets, fetched atomic.Uint64
}

// flight is a blob (or pack trailer) being fetched. done is closed once
// data or err is set.
type flight struct {
	done chan struct{}
	kind BlobKind
	data []byte
	err  error
}

// layout is a pack's decoded trailer.
type layout struct {
	entries []packEntry
	used    uint64
}

// rangeBlob is one blob to cut out of a pack range.
type rangeBlob struct {
	id  ID
	loc location
}

func newFetcher(remote bool, cache *blobCache, fetches int) *fetcher {
	return &fetcher{
		remote: remote, cache: cache, sem: make(chan struct{}, fetches),
		flights: make(map[ID]*flight), layouts: make(map[uint32]*layout),
	}
}

// spawn runs fn in the background unless the store is closing; Close waits
// for it.
func (f *fetcher) spawn(fn func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		fn()
	}()
	return true
}

func (f *fetcher) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.bg.Wait()
	if f.cache != nil {
		f.cache.close()
	}
}

// claim registers flights for the blobs no one is fetching yet and returns
// those, with their flights.
func (f *fetcher) claim(blobs []rangeBlob) ([]rangeBlob, []*flight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var own []rangeBlob
	var fls []*flight
	for _, b := range blobs {
		if _, busy := f.flights[b.id]; busy {
			continue
		}
		fl := &flight{done: make(chan struct{}), kind: b.loc.kind}
		f.flights[b.id] = fl
		own, fls = append(own, b), append(fls, fl)
	}
	return own, fls
}

// land completes claimed flights with their results, caches what was
// fetched and then forgets the flights: a reader finds a blob in flight or
// in the cache, never in neither while it is being put.
func (f *fetcher) land(own []rangeBlob, fls []*flight, data [][]byte, errs []error) {
	for i, fl := range fls {
		fl.data, fl.err = data[i], errs[i]
		close(fl.done)
	}
	if f.cache != nil {
		for i, b := range own {
			if errs[i] == nil {
				f.cache.put(b.id, data[i])
			}
		}
	}
	f.mu.Lock()
	for _, b := range own {
		delete(f.flights, b.id)
	}
	f.mu.Unlock()
}

// remoteBlob reads an indexed blob of a remote store: from the cache, from
// a fetch in flight, or with a GET that also brings its neighbours (around).
func (s *Store) remoteBlob(ctx context.Context, id, packID ID, loc location, around bool) (BlobKind, []byte, error) {
	f := s.rd
	for attempt := 0; ; attempt++ {
		if f.cache != nil {
			if data, ok := f.cache.get(id); ok {
				f.hits.Add(1)
				return loc.kind, data, nil
			}
		}
		f.mu.Lock()
		fl := f.flights[id]
		f.mu.Unlock()
		if fl != nil {
			select {
			case <-fl.done:
			case <-ctx.Done():
				return 0, nil, fmt.Errorf("read blob %s: %w", id, ctx.Err())
			}
			if fl.err == nil {
				f.hits.Add(1)
				return fl.kind, bytes.Clone(fl.data), nil
			}
			// A fetch whose reader gave up (its context ended) is no
			// verdict on the blob: fetch it ourselves.
			if attempt < 3 && ctx.Err() == nil && (errors.Is(fl.err, context.Canceled) || errors.Is(fl.err, context.DeadlineExceeded)) {
				continue
			}
			return 0, nil, fl.err
		}
		want := []rangeBlob{{id, loc}}
		if around && f.cache != nil {
			want = s.neighbours(ctx, id, loc)
		}
		own, fls := f.claim(want)
		i := slices.IndexFunc(own, func(b rangeBlob) bool { return b.id == id })
		if i < 0 {
			// Claimed by another reader in the meantime: wait for it.
			f.land(own, fls, make([][]byte, len(own)), errorsOf(len(own), errNotFetched))
			continue
		}
		f.misses.Add(1)
		data, errs := s.fetchPackRange(ctx, packID, own)
		kind, err := own[i].loc.kind, errs[i]
		var got []byte
		if err == nil {
			got = bytes.Clone(data[i]) // the flight's copy goes to waiters and the cache
		}
		// The neighbours' cache files are written in the background: the
		// reader has what it asked for.
		if len(own) == 1 || !f.spawn(func() { f.land(own, fls, data, errs) }) {
			f.land(own, fls, data, errs)
		}
		if err != nil {
			return 0, nil, err
		}
		return kind, got, nil
	}
}

// errNotFetched completes flights claimed and then given up; their waiters
// fetch for themselves.
var errNotFetched = fmt.Errorf("fetch given up: %w", context.Canceled)

func errorsOf(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// neighbours returns the blob id at loc plus the blobs around it in its pack
// worth the same GET: of the same kind, not cached, within coalesceWindow
// bytes, no gap longer than coalesceGap. Without the pack's layout, only
// the blob itself.
func (s *Store) neighbours(ctx context.Context, id ID, loc location) []rangeBlob {
	self := []rangeBlob{{id, loc}}
	if _, ext := s.idx.pack(loc.pack); ext.count <= 1 {
		return self // alone in its pack
	}
	es, err := s.packLayout(ctx, loc.pack)
	if err != nil {
		return self
	}
	i := sort.Search(len(es), func(k int) bool { return es[k].Offset >= loc.offset })
	if i == len(es) || es[i].ID != id {
		return self // the trailer disagrees with the index: read the blob alone
	}
	cache := s.rd.cache
	want := func(k int) bool { return es[k].Kind == loc.kind && !cache.has(es[k].ID) }
	lo, hi := uint64(es[i].Offset), uint64(es[i].Offset)+uint64(es[i].Stored)
	back := func(k int) int {
		for ; k >= 0 && lo-uint64(es[k].Offset)-uint64(es[k].Stored) <= coalesceGap; k-- {
			if want(k) {
				return k
			}
		}
		return -1
	}
	fwd := func(k int) int {
		for ; k < len(es) && uint64(es[k].Offset)-hi <= coalesceGap; k++ {
			if want(k) {
				return k
			}
		}
		return -1
	}
	picked := []int{i}
	b, f := back(i-1), fwd(i+1)
	for {
		if b >= 0 && hi-uint64(es[b].Offset) > coalesceWindow {
			b = -1
		}
		if f >= 0 && uint64(es[f].Offset)+uint64(es[f].Stored)-lo > coalesceWindow {
			f = -1
		}
		switch {
		case b < 0 && f < 0:
			slices.Sort(picked)
			out := make([]rangeBlob, len(picked))
			for n, k := range picked {
				e := &es[k]
				out[n] = rangeBlob{e.ID, location{pack: loc.pack, offset: e.Offset, stored: e.Stored, raw: e.Raw, kind: e.Kind, comp: e.Comp}}
			}
			return out
		case f < 0 || b >= 0 && lo-uint64(es[b].Offset) <= uint64(es[f].Offset)+uint64(es[f].Stored)-hi:
			picked = append(picked, b)
			lo = uint64(es[b].Offset)
			b = back(b - 1)
		default:
			picked = append(picked, f)
			hi = uint64(es[f].Offset) + uint64(es[f].Stored)
			f = fwd(f + 1)
		}
	}
}

// packLayout returns the entries of pack number num in offset order, from
// memory, the cache or the backend (its trailer, checked against the pack's
// ID: a pack is named by the keyed hash of its trailer).
func (s *Store) packLayout(ctx context.Context, num uint32) ([]packEntry, error) {
	f := s.rd
	packID, ext := s.idx.pack(num)
	if ext.count == 0 {
		return nil, fmt.Errorf("%w: pack %s has no known trailer", ErrNotFound, packID.Short())
	}
	for attempt := 0; attempt < 3; attempt++ {
		f.mu.Lock()
		if l := f.layouts[num]; l != nil {
			f.clock++
			l.used = f.clock
			f.mu.Unlock()
			return l.entries, nil
		}
		f.mu.Unlock()
		if f.cache != nil {
			if tail, ok := f.cache.get(packID); ok {
				if es, err := decodePackTrailer(tail, int64(ext.end)+int64(len(tail))); err == nil {
					f.addLayout(num, es)
					return es, nil
				}
			}
		}
		own, fls := f.claim([]rangeBlob{{id: packID}})
		if len(own) == 0 {
			f.mu.Lock()
			fl := f.flights[packID]
			f.mu.Unlock()
			if fl != nil {
				select {
				case <-fl.done:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			continue
		}
		es, tail, err := s.fetchTrailer(ctx, packID, ext)
		if err == nil {
			f.addLayout(num, es)
		}
		f.land(own, fls, [][]byte{tail}, []error{err})
		return es, err
	}
	return nil, fmt.Errorf("pack %s: trailer not fetched", packID.Short())
}

func (s *Store) fetchTrailer(ctx context.Context, packID ID, ext packExtent) ([]packEntry, []byte, error) {
	tail, short, err := s.readPack(ctx, packID, uint64(ext.end), uint64(ext.len()))
	if err != nil {
		return nil, nil, fmt.Errorf("read trailer of pack %s: %w", packID, err)
	}
	if short {
		return nil, nil, fmt.Errorf("%w: pack %s is truncated", ErrCorrupt, packID)
	}
	if s.hasher.Sum(tail) != packID {
		return nil, nil, fmt.Errorf("%w: the trailer of pack %s does not match the pack's ID", ErrCorrupt, packID)
	}
	es, err := decodePackTrailer(tail, int64(ext.end)+int64(len(tail)))
	if err != nil {
		return nil, nil, fmt.Errorf("pack %s: %w", packID, err)
	}
	return es, tail, nil
}

func (f *fetcher) addLayout(num uint32, es []packEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.layouts[num]; ok {
		return
	}
	for f.layoutN+len(es) > layoutEntries && len(f.layouts) > 0 {
		var oldest uint32
		first := true
		for n, l := range f.layouts {
			if first || l.used < f.layouts[oldest].used {
				oldest, first = n, false
			}
		}
		f.layoutN -= len(f.layouts[oldest].entries)
		delete(f.layouts, oldest)
	}
	f.clock++
	f.layouts[num] = &layout{entries: es, used: f.clock}
	f.layoutN += len(es)
}

// fetchIDs fetches the blobs ids that are neither pending, cached nor in
// flight, with coalesced GETs, at most Options.Fetches at once. deliver, if
// not nil, gets each blob fetched (from several goroutines). Blobs the
// index does not know are ErrNotFound; the others are fetched anyway.
func (s *Store) fetchIDs(ctx context.Context, ids []ID, deliver func(ID, []byte)) error {
	return s.fetchPlan(ctx, s.planFetch(ctx, ids, true), deliver)
}

// fetchPlan is the GETs that fetch a set of blobs.
type fetchPlan struct {
	runs []fetchRun
	err  error // about blobs not in the index
}

// fetchRun is the blobs of one GET, in offset order.
type fetchRun struct {
	pack  ID
	blobs []rangeBlob
	fls   []*flight // claimed at planning (read-ahead); nil: claimed when the GET starts
}

// planFetch groups the blobs ids that are neither pending nor cached into
// GETs: blobs of one pack, gaps of at most coalesceGap, at most maxRangeLen
// long (a longer blob on its own). refresh reloads the index for blobs it
// does not know.
func (s *Store) planFetch(ctx context.Context, ids []ID, refresh bool) fetchPlan {
	type item struct {
		rangeBlob
		pack ID
	}
	var items []item
	var missing []ID
	s.mu.Lock()
	for _, id := range ids {
		if _, ok := s.pending[id]; !ok && !id.IsZero() {
			missing = append(missing, id)
		}
	}
	s.mu.Unlock()
	cache := s.rd.cache
	lookup := func(ids []ID) (left []ID) {
		for _, id := range ids {
			packID, loc, ok := s.idx.lookup(id)
			switch {
			case !ok:
				left = append(left, id)
			case cache == nil || !cache.has(id):
				items = append(items, item{rangeBlob{id, loc}, packID})
			}
		}
		return left
	}
	var p fetchPlan
	if missing = lookup(missing); len(missing) > 0 && refresh {
		if err := s.refreshIndex(ctx); err != nil {
			p.err = fmt.Errorf("%d blobs are not in the store's index, and reloading the index failed: %w", len(missing), err)
		} else if missing = lookup(missing); len(missing) > 0 {
			p.err = s.missingBlob(missing[0], len(missing))
		}
	}
	slices.SortFunc(items, func(a, b item) int {
		if a.loc.pack != b.loc.pack {
			return int(int64(a.loc.pack) - int64(b.loc.pack))
		}
		return int(int64(a.loc.offset) - int64(b.loc.offset))
	})
	items = slices.CompactFunc(items, func(a, b item) bool { return a.id == b.id })
	for start := 0; start < len(items); {
		end := start + 1
		from := uint64(items[start].loc.offset)
		for end < len(items) {
			prev, next := items[end-1].loc, items[end].loc
			stop := uint64(next.offset) + uint64(next.stored)
			if next.pack != prev.pack || uint64(next.offset) > uint64(prev.offset)+uint64(prev.stored)+coalesceGap || stop-from > maxRangeLen {
				break
			}
			end++
		}
		r := fetchRun{pack: items[start].pack, blobs: make([]rangeBlob, end-start)}
		for i := range r.blobs {
			r.blobs[i] = items[start+i].rangeBlob
		}
		p.runs = append(p.runs, r)
		start = end
	}
	return p
}

// claimAll claims the plan's blobs now, dropping those in flight already.
func (f *fetcher) claimAll(p *fetchPlan) {
	runs := p.runs[:0]
	for _, r := range p.runs {
		if r.blobs, r.fls = f.claim(r.blobs); len(r.blobs) > 0 {
			runs = append(runs, r)
		}
	}
	p.runs = runs
}

// abandon completes the flights of a claimed plan that will not run.
func (f *fetcher) abandon(p fetchPlan) {
	for _, r := range p.runs {
		if r.fls != nil {
			f.land(r.blobs, r.fls, make([][]byte, len(r.blobs)), errorsOf(len(r.blobs), errNotFetched))
		}
	}
}

// fetchPlan runs a plan's GETs, Options.Fetches at once over the store, and
// returns the plan's error or the first failure.
func (s *Store) fetchPlan(ctx context.Context, p fetchPlan, deliver func(ID, []byte)) error {
	f := s.rd
	var (
		mu       sync.Mutex
		failed   int
		firstErr = p.err
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed++; firstErr == nil {
			firstErr = err
		}
	}
	for i, r := range p.runs {
		select {
		case f.sem <- struct{}{}:
		case <-ctx.Done():
			f.abandon(fetchPlan{runs: p.runs[i:]})
			wg.Wait()
			if firstErr == nil {
				firstErr = ctx.Err()
			}
			return firstErr
		}
		wg.Go(func() {
			defer func() { <-f.sem }()
			if r.fls == nil {
				if r.blobs, r.fls = f.claim(r.blobs); len(r.blobs) == 0 {
					return
				}
			}
			data, errs := s.fetchPackRange(ctx, r.pack, r.blobs)
			for i, b := range r.blobs {
				if errs[i] != nil {
					fail(errs[i])
				} else if deliver != nil {
					deliver(b.id, data[i])
				}
			}
			f.land(r.blobs, r.fls, data, errs)
		})
	}
	wg.Wait()
	if failed > 1 {
		return fmt.Errorf("%d blobs could not be fetched; the first: %w", failed, firstErr)
	}
	return firstErr
}

func (f *fetcher) stats(st *Stats) {
	st.Gets, st.FetchedBytes = f.gets.Load(), f.fetched.Load()
	st.CacheHits, st.CacheMisses = f.hits.Load(), f.misses.Load()
	if f.cache != nil {
		cs := f.cache.stats()
		st.CacheBlobs, st.CacheBytes, st.CacheLimit = cs.blobs, cs.bytes, cs.limit
		st.CacheEvicted, st.CacheDropped = cs.evicted, cs.dropped
	}
}
