package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

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
	// CacheSize is the most bytes the local blob cache under
	// CacheDir/<store ID>/blobs/ may hold (files counted in whole 4 KiB
	// blocks); least recently used blobs are evicted beyond it, pinned ones
	// never (see Pin). Default (0): DefaultCacheSize, 10 GiB. Negative: no
	// blob cache (index files are still cached). Without CacheDir, and for
	// local backends, there is no blob cache.
	CacheSize int64
	// Fetches is how many ranged GETs Prefetch, Warmup and read-ahead issue
	// at once, over the whole store. Default: DefaultFetches (8).
	Fetches int
	// ReadAhead is how many bytes of a file a FileReader read sequentially
	// fetches ahead of the reader, in the background (remote backends
	// only). Default: DefaultReadAhead (8 MiB). Negative: no read-ahead.
	ReadAhead int64
	// Logf receives warnings for operators: index files skipped because
	// they are corrupt (see CorruptIndex). Default: none.
	Logf func(format string, args ...any)
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
	rd       *fetcher    // blob reads: blob cache, coalescing, read-ahead (fetch.go)
	opts     Options
	ctx      context.Context // for background uploads; cancelled by Close
	cancel   context.CancelFunc
	jobs     chan chunkJob
	chunkers sync.Pool // *cdc.Chunker with this store's cutter
	workerWG sync.WaitGroup

	flushMu sync.Mutex   // one Flush at a time
	life    sync.RWMutex // read-held by PutFile; Close write-holds it to close jobs

	mu        sync.Mutex
	cond      *sync.Cond // signalled when an upload finishes
	closed    bool
	idle      []*openPack        // open packs no writer holds
	busy      int                // open packs a writer holds
	pending   map[ID]pendingBlob // blobs not yet in an uploaded pack
	queue     []*openPack        // sealed, waiting for an uploader
	uploaders int                // running upload goroutines
	failed    []*openPack        // uploads that gave up; retried by Flush
	uploadErr error              // why the last upload failed
	unindexed []indexPack        // uploaded packs awaiting an index file
	stats     Stats

	refreshMu  sync.Mutex  // one refreshIndex at a time; guards knownIndex and badIndex
	knownIndex map[ID]bool // index files in idx: loaded or written by this store, or skipped as corrupt
	badIndex   map[ID]bool // index files skipped as corrupt (see CorruptIndex)
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
	// Reads since Open. Gets and FetchedBytes count every backend; the
	// cache fields stay zero for local backends, which have no cache.
	Gets         uint64 // ranged GETs of packs (blob ranges and pack trailers)
	FetchedBytes uint64 // bytes those GETs returned
	CacheHits    uint64 // blob reads of a remote store served without a GET of their own (cache file, a fetch in flight, read-ahead)
	CacheMisses  uint64 // blob reads of a remote store that issued a GET
	CacheBlobs   int    // files in the blob cache (blobs and pack trailers) that this process knows
	CacheBytes   int64  // their size, in whole 4 KiB blocks
	CacheLimit   int64  // Options.CacheSize in effect; 0: no blob cache
	CacheEvicted uint64 // files evicted to stay within CacheLimit
	CacheDropped uint64 // cache files found corrupt or missing, dropped and fetched again
}

// openPack is a pack being filled. One writer at a time holds it (see
// acquirePack), so blobs are compressed straight into its buffer.
type openPack struct {
	buf     []byte
	entries []packEntry
	id      ID
	release func() // set when the backend took buf (ownedPutter): the uploader's share of freeing it
}

// pendingBlob is a blob stored in a pack that is not uploaded yet. stored
// aliases the pack's buffer; read it only with s.mu held.
type pendingBlob struct {
	kind   BlobKind
	comp   uint8
	raw    uint32
	stored []byte
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
	if opts.Fetches <= 0 {
		opts.Fetches = DefaultFetches
	}
	if opts.ReadAhead == 0 {
		opts.ReadAhead = DefaultReadAhead
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
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
	remote := !be.Properties().Local
	var blobs *blobCache
	if opts.CacheDir != "" && remote && opts.CacheSize > 0 {
		if blobs, err = openBlobCache(opts.CacheDir, cfg.ID, opts.CacheSize, s.hasher); err != nil {
			s.dec.Close()
			return nil, err
		}
	}
	s.rd = newFetcher(remote, blobs, opts.Fetches)
	if err := s.loadIndex(ctx); err != nil {
		s.rd.close()
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
	s.rd.stats(&st)
	return st
}

// Close refuses new writes (they fail with ErrClosed), waits for writes in
// progress, flushes (see Flush), stops background work and releases memory.
// It returns the flush's error, if any: then the data that was not flushed
// is lost, and the caller must report it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.life.Lock() // wait for PutFile calls in progress
	close(s.jobs)
	s.life.Unlock()
	s.workerWG.Wait()
	err := s.flush(context.Background())
	s.cancel()
	s.mu.Lock()
	for s.uploaders > 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()
	s.rd.close() // after cancel: read-ahead stops
	if s.enc != nil {
		s.enc.Close()
	}
	s.dec.Close()
	return err
}
