package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/cdc"
)

// Options configure Open. The zero value works.
type Options struct {
	// CacheDir is where the store keeps local copies of its index files, so
	// that opening and looking up blobs never touches a remote backend for
	// data it has seen before. Empty: no local cache (index files are read
	// from the backend at every Open). Ignored for local backends.
	CacheDir string
	// Workers is the number of goroutines that hash and compress chunks of
	// one large file in parallel. Default: GOMAXPROCS.
	Workers int
	// Uploads is the number of packs written to the backend at once, and so
	// (plus one) the number of full packs held in memory. Default: 2.
	Uploads int
	// UploadRetries is how many times a failed pack upload is retried, with
	// exponential backoff from 100 ms, before Flush reports the failure.
	// Default: 3. Packs that failed stay in memory and are retried by the
	// next Flush.
	UploadRetries int
}

// Store is a content-addressed blob store over a backend: blobs are deduped
// by ID, compressed, packed and indexed. Safe for concurrent use.
type Store struct {
	be       backend.Backend
	cfg      *Config
	hasher   *Hasher
	cutter   *cdc.Cutter
	enc      *zstd.Encoder // nil when compression is off
	dec      *zstd.Decoder
	idx      *memIndex
	cache    *indexCache // nil without a local cache
	opts     Options
	ctx      context.Context // for background uploads; cancelled by Close
	cancel   context.CancelFunc
	jobs     chan chunkJob
	workerWG sync.WaitGroup

	flushMu sync.Mutex   // one Flush at a time
	life    sync.RWMutex // read-held by PutFile; Close write-holds it to close jobs

	mu        sync.Mutex
	cond      *sync.Cond // signalled when an upload finishes
	closed    bool
	cur       *openPack          // the pack being filled
	pending   map[ID]pendingBlob // blobs not yet in an uploaded pack
	queue     []*openPack        // sealed, waiting for an uploader
	uploaders int                // running upload goroutines
	failed    []*openPack        // uploads that gave up; retried by Flush
	uploadErr error              // why the last upload failed
	unindexed []indexPack        // uploaded packs awaiting an index file
	stats     Stats
}

// Stats counts what a store has done since it was opened, plus the size of
// its index.
type Stats struct {
	Blobs       int    // blobs in the index, uploaded or pending
	Packs       int    // packs in the index
	StoredBytes uint64 // stored (compressed) bytes of indexed blobs
	// Since Open:
	NewBlobs       uint64 // blobs added
	NewRawBytes    uint64 // their plaintext bytes
	NewStoredBytes uint64 // their stored bytes
	DedupedBlobs   uint64 // blobs offered that the store already had
}

type openPack struct {
	buf     []byte
	entries []packEntry
	id      ID
}

type pendingBlob struct {
	p *openPack
	i int
}

// Init creates a new store in be with a fresh random key. It fails with
// ErrConflict if be already holds a store.
func Init(ctx context.Context, be backend.Backend, opts InitOptions) (*Config, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	data, err := encodeConfig(cfg)
	if err != nil {
		return nil, err
	}
	where := be.Properties().Location
	if err := probeConditionalPut(ctx, be, cfg.ID); err != nil {
		return nil, err
	}
	if _, err := be.Put(ctx, configKey, bytes.NewReader(data), backend.Condition{IfNoneMatch: true}); err != nil {
		if errors.Is(err, backend.ErrConflict) {
			return nil, fmt.Errorf("%w: a cairn store already exists at %s; use it as it is, or choose another location", ErrConflict, where)
		}
		return nil, fmt.Errorf("create store at %s: %w", where, err)
	}
	return cfg, nil
}

// probeConditionalPut checks that be enforces If-None-Match and If-Match:
// refs depend on them, and some S3-compatible servers silently ignore them,
// which nothing in the protocol reveals.
func probeConditionalPut(ctx context.Context, be backend.Backend, nonce string) error {
	key := "probe-" + nonce
	defer be.Delete(context.WithoutCancel(ctx), key)
	where := be.Properties().Location
	if _, err := be.Put(ctx, key, bytes.NewReader([]byte("1")), backend.Condition{IfNoneMatch: true}); err != nil {
		return fmt.Errorf("create store at %s: %w", where, err)
	}
	ignored := func(header string) error {
		return fmt.Errorf("%w: the store backend at %s ignores conditional writes (%s); cairn needs them so that two writers can never both move a workspace. Use a server that supports them (AWS S3, MinIO, versitygw)", ErrInvalid, where, header)
	}
	_, err := be.Put(ctx, key, bytes.NewReader([]byte("2")), backend.Condition{IfNoneMatch: true})
	switch {
	case err == nil:
		return ignored("If-None-Match")
	case !errors.Is(err, backend.ErrConflict):
		return fmt.Errorf("create store at %s: %w", where, err)
	}
	_, err = be.Put(ctx, key, bytes.NewReader([]byte("3")), backend.Condition{IfMatch: "not-the-etag"})
	switch {
	case err == nil:
		return ignored("If-Match")
	case !errors.Is(err, backend.ErrConflict):
		return fmt.Errorf("create store at %s: %w", where, err)
	}
	return nil
}

// Open opens the store in be: it reads the config and loads the index (from
// the local cache where possible). The store does not own be: Close the
// backend after the store.
func Open(ctx context.Context, be backend.Backend, opts Options) (*Store, error) {
	where := be.Properties().Location
	data, err := backend.ReadAll(ctx, be, configKey)
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) {
			return nil, fmt.Errorf("%w: no cairn store at %s (its config object is missing); create one with `cairn init`", ErrNotFound, where)
		}
		return nil, fmt.Errorf("open store at %s: %w", where, err)
	}
	cfg, err := decodeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("open store at %s: %w", where, err)
	}
	key, err := cfg.Key()
	if err != nil {
		return nil, err
	}
	cutter, err := cdc.NewCutter(cfg.cdcParams())
	if err != nil {
		return nil, fmt.Errorf("%w: store config: %v", ErrCorrupt, err)
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.Uploads <= 0 {
		opts.Uploads = 2
	}
	if opts.UploadRetries <= 0 {
		opts.UploadRetries = 3
	}
	s := &Store{
		be: be, cfg: cfg, hasher: NewHasher(key), cutter: cutter,
		idx: newMemIndex(), opts: opts, pending: make(map[ID]pendingBlob),
		jobs: make(chan chunkJob, 4*opts.Workers),
	}
	s.cond = sync.NewCond(&s.mu)
	if cfg.Compression.Algorithm == "zstd" {
		s.enc, err = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.EncoderLevel(cfg.Compression.Level)),
			zstd.WithEncoderConcurrency(opts.Workers),
			zstd.WithEncoderCRC(false), // every blob is verified against its keyed hash
			zstd.WithZeroFrames(true))
		if err != nil {
			return nil, fmt.Errorf("zstd encoder: %w", err)
		}
	}
	s.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(opts.Workers), zstd.WithDecoderMaxMemory(1<<32))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	if opts.CacheDir != "" && !be.Properties().Local {
		s.cache, err = openIndexCache(opts.CacheDir, cfg.ID)
		if err != nil {
			s.dec.Close()
			return nil, err
		}
	}
	if err := s.loadIndex(ctx); err != nil {
		s.dec.Close()
		return nil, fmt.Errorf("open store at %s: %w", where, err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for range opts.Workers {
		s.workerWG.Add(1)
		go s.worker()
	}
	return s, nil
}

// Config returns the store's configuration. The caller must not modify it.
func (s *Store) Config() *Config { return s.cfg }

// Backend returns the backend the store was opened on.
func (s *Store) Backend() backend.Backend { return s.be }

// Hasher returns the store's ID function.
func (s *Store) Hasher() *Hasher { return s.hasher }

// Stats returns current counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	pending := len(s.pending)
	s.mu.Unlock()
	blobs, packs, stored := s.idx.counts()
	st.Blobs, st.Packs, st.StoredBytes = blobs+pending, packs, stored
	return st
}

// Close flushes pending blobs (see Flush), stops background work and
// releases memory. It returns Flush's error, if any: then the data that was
// not flushed is lost, and the caller must report it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	err := s.Flush(context.Background())
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.life.Lock() // wait for running PutFile calls
	close(s.jobs)
	s.life.Unlock()
	s.workerWG.Wait()
	s.cancel()
	s.mu.Lock()
	for s.uploaders > 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()
	if s.enc != nil {
		s.enc.Close()
	}
	s.dec.Close()
	return err
}

// Has reports whether the store holds the blob (uploaded or pending).
func (s *Store) Has(id ID) bool {
	s.mu.Lock()
	_, ok := s.pending[id]
	s.mu.Unlock()
	return ok || s.idx.has(id)
}

// PutBlob stores data as a blob of the given kind, unless the store already
// has it, and returns its ID and whether it was new. The blob is durable once
// a later Flush returns.
func (s *Store) PutBlob(ctx context.Context, kind BlobKind, data []byte) (ID, bool, error) {
	id := s.hasher.Sum(data)
	added, err := s.putBlobID(ctx, kind, id, data)
	return id, added, err
}

// putBlobID stores data under its already computed ID.
func (s *Store) putBlobID(ctx context.Context, kind BlobKind, id ID, data []byte) (bool, error) {
	if !kind.Valid() {
		return false, fmt.Errorf("%w: blob kind %d", ErrInvalid, kind)
	}
	if len(data) > maxBlobSize {
		return false, fmt.Errorf("%w: blob of %d bytes exceeds the %d-byte limit", ErrInvalid, len(data), maxBlobSize)
	}
	if s.Has(id) {
		s.mu.Lock()
		s.stats.DedupedBlobs++
		s.mu.Unlock()
		return false, nil
	}
	stored, comp, release := s.compress(data)
	defer release()
	return s.addToPack(ctx, kind, id, comp, stored, len(data))
}

// maxBlobSize keeps every blob's lengths within the u32 fields of the formats.
const maxBlobSize = 1<<32 - 1 - packHeaderSize - packEntrySize - packFooterSize

var compressBufs = sync.Pool{New: func() any { return new([]byte) }}

// compress returns the bytes to store for data and the compression used.
// release returns the buffer to a pool once the bytes are copied into a pack.
func (s *Store) compress(data []byte) (stored []byte, comp uint8, release func()) {
	if s.enc == nil || len(data) < 64 {
		return data, compNone, func() {}
	}
	bp := compressBufs.Get().(*[]byte)
	out := s.enc.EncodeAll(data, (*bp)[:0])
	*bp = out
	if len(out) >= len(data) {
		compressBufs.Put(bp)
		return data, compNone, func() {}
	}
	return out, compZstd, func() { compressBufs.Put(bp) }
}

func (s *Store) addToPack(ctx context.Context, kind BlobKind, id ID, comp uint8, stored []byte, raw int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return false, ErrClosed
		}
		if _, ok := s.pending[id]; ok || s.idx.has(id) {
			s.stats.DedupedBlobs++
			return false, nil // another goroutine stored it meanwhile
		}
		if len(s.failed) > 0 {
			return false, fmt.Errorf("earlier pack upload failed, Flush to retry: %w", s.uploadErr)
		}
		if s.cur == nil || len(s.cur.buf)+len(stored) <= s.cfg.PackSize {
			break
		}
		// The open pack is full. Back-pressure: at most Uploads packs
		// waiting besides those uploading.
		if len(s.queue) >= s.opts.Uploads {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			s.cond.Wait()
			continue
		}
		s.sealLocked()
	}
	if s.cur == nil {
		s.cur = &openPack{buf: make([]byte, 0, s.cfg.PackSize+64<<10)}
		s.cur.buf = append(s.cur.buf, packHeader()...)
	}
	p := s.cur
	p.entries = append(p.entries, packEntry{
		ID: id, Kind: kind, Comp: comp,
		Offset: uint32(len(p.buf)), Stored: uint32(len(stored)), Raw: uint32(raw),
	})
	p.buf = append(p.buf, stored...)
	s.pending[id] = pendingBlob{p: p, i: len(p.entries) - 1}
	s.stats.NewBlobs++
	s.stats.NewRawBytes += uint64(raw)
	s.stats.NewStoredBytes += uint64(len(stored))
	return true, nil
}

// sealLocked closes the current pack and queues it for upload.
func (s *Store) sealLocked() {
	p := s.cur
	if p == nil || len(p.entries) == 0 {
		return
	}
	s.cur = nil
	trailerStart := len(p.buf)
	p.buf = appendPackTrailer(p.buf, p.entries)
	// The trailer lists every blob's ID (a hash of its content), offset and
	// lengths, so its hash names the pack's content without hashing the
	// whole pack again.
	p.id = s.hasher.Sum(p.buf[trailerStart:])
	s.queue = append(s.queue, p)
	if s.uploaders < s.opts.Uploads {
		s.uploaders++
		go s.uploader()
	}
}

// uploader writes queued packs until the queue is empty.
func (s *Store) uploader() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 {
		p := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		err := s.uploadPack(p)
		s.mu.Lock()
		if err != nil {
			s.failed = append(s.failed, p)
			s.uploadErr = err
		} else {
			s.idx.addPack(p.id, p.entries)
			for _, e := range p.entries {
				delete(s.pending, e.ID)
			}
			s.unindexed = append(s.unindexed, indexPack{ID: p.id, Entries: p.entries})
		}
		s.cond.Broadcast()
	}
	s.uploaders--
	s.cond.Broadcast()
}

func (s *Store) uploadPack(p *openPack) error {
	delay := 100 * time.Millisecond
	var err error
	for attempt := 0; ; attempt++ {
		_, err = s.be.Put(s.ctx, packKey(p.id), bytes.NewReader(p.buf), backend.Condition{})
		if err == nil || attempt >= s.opts.UploadRetries || s.ctx.Err() != nil || errors.Is(err, backend.ErrPermission) {
			break
		}
		select {
		case <-time.After(delay):
		case <-s.ctx.Done():
		}
		delay *= 2
	}
	if err != nil {
		return fmt.Errorf("upload pack %s (%d blobs, %d bytes): %w", p.id.Short(), len(p.entries), len(p.buf), err)
	}
	return nil
}

// Flush makes every blob stored before the call durable: it seals the open
// pack, waits for (and retries) pack uploads, then writes an index file for
// the packs uploaded since the last Flush. Packs always reach the backend
// before the index file that lists them.
func (s *Store) Flush(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if len(s.failed) > 0 { // retry what failed before
		s.queue = append(s.failed, s.queue...)
		s.failed = nil
		s.uploadErr = nil
		for s.uploaders < s.opts.Uploads && s.uploaders < len(s.queue) {
			s.uploaders++
			go s.uploader()
		}
	}
	s.sealLocked()
	for len(s.queue) > 0 || s.uploaders > 0 {
		s.cond.Wait()
	}
	if len(s.failed) > 0 {
		err := s.uploadErr
		s.mu.Unlock()
		return fmt.Errorf("flush: %w", err)
	}
	packs := s.unindexed
	s.unindexed = nil
	s.mu.Unlock()

	if len(packs) == 0 {
		return nil
	}
	if err := s.writeIndex(ctx, &indexFile{Packs: packs}); err != nil {
		s.mu.Lock()
		s.unindexed = append(packs, s.unindexed...)
		s.mu.Unlock()
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

func (s *Store) writeIndex(ctx context.Context, f *indexFile) error {
	data := encodeIndex(f)
	id := s.hasher.Sum(data)
	if _, err := s.be.Put(ctx, indexKey(id), bytes.NewReader(data), backend.Condition{}); err != nil {
		return fmt.Errorf("write index %s: %w", id.Short(), err)
	}
	if s.cache != nil {
		s.cache.store(id, data) // best effort: a missing cache entry is fetched again
	}
	return nil
}

// Blob returns the plaintext of a blob, verified against its ID.
func (s *Store) Blob(ctx context.Context, id ID) ([]byte, error) {
	_, data, err := s.blob(ctx, id)
	return data, err
}

// blob returns a blob with its kind.
func (s *Store) blob(ctx context.Context, id ID) (BlobKind, []byte, error) {
	// Pending first: a blob moves from pending to the index, never back, and
	// the index learns of it before pending forgets it.
	s.mu.Lock()
	if pb, ok := s.pending[id]; ok {
		e := pb.p.entries[pb.i]
		stored := pb.p.buf[e.Offset : e.Offset+e.Stored]
		data, err := s.decode(e.Comp, stored, e.Raw)
		s.mu.Unlock()
		if err != nil {
			return 0, nil, fmt.Errorf("pending blob %s: %w", id, err)
		}
		return e.Kind, data, nil
	}
	s.mu.Unlock()

	packID, loc, ok := s.idx.lookup(id)
	if !ok {
		return 0, nil, fmt.Errorf("%w: blob %s is not in the store's index", ErrNotFound, id)
	}
	rc, err := s.be.Get(ctx, packKey(packID), int64(loc.offset), int64(loc.stored))
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) || errors.Is(err, backend.ErrRange) {
			return 0, nil, fmt.Errorf("%w: blob %s: pack %s is missing or truncated in the store (%v); the store is damaged", ErrCorrupt, id, packID, err)
		}
		return 0, nil, fmt.Errorf("read blob %s from pack %s: %w", id, packID, err)
	}
	stored := make([]byte, loc.stored)
	_, err = io.ReadFull(rc, stored)
	rc.Close()
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, nil, fmt.Errorf("%w: blob %s: pack %s is truncated", ErrCorrupt, id, packID)
		}
		return 0, nil, fmt.Errorf("read blob %s from pack %s: %w", id, packID, err)
	}
	data, err := s.decode(loc.comp, stored, loc.raw)
	if err != nil {
		return 0, nil, fmt.Errorf("blob %s in pack %s: %w", id, packID, err)
	}
	if got := s.hasher.Sum(data); got != id {
		return 0, nil, fmt.Errorf("%w: blob %s in pack %s does not match its ID (hashes to %s): the pack is corrupt, or the store's hash key was changed", ErrCorrupt, id, packID, got.Short())
	}
	return loc.kind, data, nil
}

func (s *Store) decode(comp uint8, stored []byte, raw uint32) ([]byte, error) {
	switch comp {
	case compNone:
		if uint32(len(stored)) != raw {
			return nil, fmt.Errorf("%w: stored length %d, expected %d", ErrCorrupt, len(stored), raw)
		}
		return bytes.Clone(stored), nil
	case compZstd:
		out, err := s.dec.DecodeAll(stored, make([]byte, 0, raw))
		if err != nil {
			return nil, fmt.Errorf("%w: decompress: %v", ErrCorrupt, err)
		}
		if uint32(len(out)) != raw {
			return nil, fmt.Errorf("%w: decompressed to %d bytes, expected %d", ErrCorrupt, len(out), raw)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown compression %d", ErrCorrupt, comp)
}
