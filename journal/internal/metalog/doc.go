// Package metalog is the journal's metadata store: Badger behind an
// append-only log and in-memory tables, so that an operation's metadata
// change costs one write(2) on the request's own thread instead of a Badger
// transaction handed to Badger's commit goroutine.
//
// # Writes
//
// A read-write transaction (Update, NewTransaction(true)) collects its sets
// and deletes. Commit encodes them as one record (length, CRC-32C, sequence
// number, the writes), appends it to the current log segment with one
// pwrite(2) and applies it to the active memtable, an ordered tree of
// versioned entries. When Commit returns, the record is in the kernel's
// page cache: it survives kill -9 of the process. Sync fdatasyncs the
// segments written since the last Sync, for power loss.
//
// # Checkpoints
//
// When the active memtable passes its size (Options.MemtableBytes), it is
// frozen and a new segment starts; a background goroutine writes each frozen
// memtable's newest versions to Badger together with the last sequence
// number it holds (the checkpoint), in one Badger transaction when they fit
// (atomic in Badger's write-ahead log), and only then deletes the
// memtable's segment. Badger therefore holds every record up to the
// checkpoint, and the segments hold every record after it. Badger is synced
// before the segment goes when that segment was synced (an fsync promised
// its records) or the table took several transactions; otherwise the next
// Sync syncs Badger, so that power loss leaves Badger at this checkpoint or
// an earlier one, never between. A full backlog (Options.MaxFrozen frozen
// memtables) makes Commit wait for the checkpointer, which bounds memory and
// the log on disk; a checkpointer that cannot write (Options.CheckpointGate:
// the journal's full-disk guard) makes Commit fail with its error then.
//
// # Recovery
//
// Open reads the checkpoint from Badger and replays the segments' records
// after it into frozen memtables (checkpointed in the background as usual).
// Replay stops at the first record that is torn (short, bad CRC) or out of
// sequence: what follows it was never acknowledged, or was lost with power
// before a Sync. Each record is one transaction, so the state after a crash
// is a prefix of the committed transactions.
//
// # Reads
//
// A transaction reads a snapshot: its own writes first, then the memtables
// (newest first, only versions up to the sequence number it started at),
// then a Badger read transaction opened at the same moment. Iterators merge
// those sources in key order. Transactions may run concurrently with
// commits and checkpoints; commits are serialised.
//
// The API follows the subset of Badger's the journal uses (Txn, Item,
// Iterator, WriteBatch, ErrKeyNotFound, ErrTxnTooBig), so that the journal's
// code reads as before.
package metalog
