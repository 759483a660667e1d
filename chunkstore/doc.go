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
// are fetched. Blob and FileReader read single blobs with ranged GETs.
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
