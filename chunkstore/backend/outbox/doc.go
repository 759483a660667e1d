// Package outbox is a write-back backend: it makes a snapshot's uploads to
// a remote store (S3) background work that survives a crash, an outage and
// a restart of the daemon, without weakening what a ref means.
//
// Packs, index files and snapshot records (immutable, content-addressed)
// are queued and Put returns; uploading starts at once. A queued object is
// held in memory (up to Options.Memory) and written to local disk only
// when it must be durable and is still queued: Sync writes and fsyncs
// what is left (chunkstore.Store.Flush and PutSnapshot call it; a ref move
// does it first; Close does it). Beyond the memory limit (a slow or dead
// remote), objects are written to disk at once (data, then a queue record
// renamed into place), unsynced until Sync. So on a healthy remote most
// objects never touch the local disk: a snapshot's data is read from the
// journal, packed and uploaded, and only its tail (what is still in
// flight when the snapshot must be durable) is written here. (Writing and
// fsyncing every pack first more than halved the upload rate on a
// disk-bound machine.) A restart trusts the entries up to Sync's
// watermark; later ones, which a crash of the machine may have torn, are
// checked against their CRC-32C and the first torn one is dropped with
// everything after it: none of them had been acknowledged as durable, and
// the journal makes them again. Uploaded objects that were on disk are
// kept there (Options.Keep) as a cache, dropped after a reboot. Reads of
// queued objects (Get, Stat, List) are served from memory or the local
// copy, so the process that wrote them sees them at once. A ref move (a
// conditional Put of refs/WORKSPACE) is checked against the ref as this
// process sees it (the latest queued move, else the remote's) and queued
// too, with the value it replaces, and written to disk durably. Everything else (the store's config, leases) is
// written through to the remote at once.
//
// One goroutine uploads the queue in order, several objects at a time,
// retrying failures with exponential backoff for as long as it takes (a
// dead S3 only delays uploads; nothing is dropped). A ref move waits until
// every entry queued before it is uploaded, so a ref in the remote never
// points at objects the remote lacks; it is then applied by
// compare-and-swap: the remote must still hold the value the move
// replaced. If another writer moved the ref first the move is lost: it is
// dropped and reported (Pending.Lost), and the snapshot it named stays in
// the store, where it can be forked. An index file waits for the entries
// before it too: other machines dedupe against the packs an index lists,
// and their ref moves wait only for their own queues, so an index in the
// remote before its packs would let another machine's snapshot name a
// pack that this machine might never upload.
//
// Refs seen through the outbox carry content ETags ("c-" and a hash of the
// value): a queued value and the same value uploaded have the same ETag,
// so a caller's compare-and-swap chain (chunkstore.Store.SetRef) does not
// notice when its moves reach the remote.
//
// Wait returns when everything queued so far is uploaded (`cairn snapshot
// --wait`, unmount); Pending says what is queued and whether uploads fail
// (`cairn status`).
package outbox
