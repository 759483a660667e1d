// Package chunkstore is cairn's content-addressed store: everything a
// workspace ever was lives here as immutable, verified, deduplicated blobs.
//
// # Objects
//
// A store lives in a backend (package backend: a local directory or an S3
// bucket prefix) under these keys:
//
//	config                 format version, random hash key, chunker and compression parameters (JSON)
//	packs/<2 hex>/<id>     packs: many compressed blobs plus a trailer (pack.go)
//	index/<id>             one index file per Flush: blob ID -> pack, offset, lengths (index.go)
//	snapshots/<id>         snapshot records (snapshot.go)
//	refs/<workspace>       a workspace's head, moved only by compare-and-swap (ref.go)
//	leases/<workspace>     the lease of the mount that serves a workspace: holder, expiry (JSON; lease.go)
//
// Every ID is the keyed BLAKE3-256 of the plaintext under the store's random
// key (id.go), so IDs reveal nothing across stores, and every read is checked
// against its ID: corruption is an ErrCorrupt naming the blob and the pack,
// never wrong bytes. Every format starts with a magic and a version; a
// version this build does not know is ErrVersion.
//
// # Writing
//
// PutFile cuts a stream into content-defined chunks (package cdc: FastCDC
// with a gear table seeded from the store key), hashes them, drops those the
// index already has, compresses the rest with zstd (storing raw what does not
// shrink) and appends them to the open pack. Full packs are uploaded in the
// background, a bounded number at a time. Flush seals the open pack, waits
// for the uploads (retrying failures; a pack that cannot be uploaded stays in
// memory and Flush reports the error), and only then writes the index file
// that lists them. PutSnapshot flushes before it writes the record, and
// SetRef checks the record exists before it moves the ref: packs and index,
// then snapshot, then ref, so a reader never follows a ref to missing data.
//
// # Reading
//
// Open loads every index file into a compact in-memory table (idtable.go:
// about 52 bytes per blob; a million blobs cost ~66 MB). For remote
// backends the index files are cached in Options.CacheDir and only new ones
// are fetched. From a local backend, Blob and FileReader read each blob
// with one ranged read of its pack.
//
// # Remote reads and the local cache
//
// For a remote backend (S3), blobs go through a local blob cache under
// Options.CacheDir/<store ID>/blobs/ (blobcache.go): one file per blob,
// named by its ID and holding its plaintext, bounded by Options.CacheSize
// (default 10 GiB) with LRU eviction. Every read of a cache file is checked
// against its name, so a damaged file is dropped and fetched again, never
// returned. Recency is the files' mtimes, so the cache survives a restart: a
// background scan at Open rebuilds the LRU order. Pin keeps blobs a caller
// needs out of eviction. Local backends have no blob cache.
//
// A blob the cache lacks is fetched with one GET that also covers the blobs
// likely needed next (fetch.go): the neighbouring blobs of the same kind in
// its pack, up to 1 MiB (a snapshot's trees lie together, so walking 1000
// directories costs a few GETs, not 1000); for a FileReader read in order,
// the file's following chunks, fetched ahead in the background (up to
// Options.ReadAhead, 8 MiB). Prefetch fetches many blobs with parallel
// coalesced GETs (Options.Fetches at once), and Warmup a whole tree: its
// trees first, then chunk lists, then file data. Readers of a blob being
// fetched wait for that GET rather than issue their own. Stats counts GETs,
// bytes fetched, cache hits, misses and the cache's size.
//
// # Concurrency
//
// A Store is safe for concurrent use. Two processes may write to one store:
// blobs and packs are content-addressed and idempotent, and refs move by
// compare-and-swap, so two writers of one workspace can never both win.
// A mount also holds a lease on its workspace (AcquireLease), so that two
// machines do not serve one workspace at once by accident; leases assume
// clocks that agree within LeaseGrace.
package chunkstore
