// Package journal is the live state of a mounted workspace and the place
// where all POSIX semantics live: lookup, create, rename (with
// RENAME_NOREPLACE and RENAME_EXCHANGE), hard links, symlinks, device
// nodes, sparse reads and writes, truncate, fallocate, copy_file_range,
// SEEK_DATA/SEEK_HOLE, xattrs, sticky directories, setuid/setgid clearing,
// quotas. Package fs only translates FUSE requests into these calls and the
// sentinel errors of errors.go into errnos.
//
// # Storage
//
// Metadata (keys.go: inode records, directory entries, xattrs, the dirty
// set and the journal's state, all under an epoch prefix) lives in
// internal/metalog: each operation's changes are one record appended to the
// journal's own log with one pwrite(2) on the request's thread and applied
// to an in-memory table; a background checkpointer writes full tables to
// Badger in batches, and Open replays the log after Badger's checkpoint.
// Data of changed files lives in staging files, one per inode, a sparse file
// kept exactly as long as the file (copy-up on first change); unchanged
// files are read from the store's chunks. Holes survive both ways: a
// snapshot finds a staging file's holes with SEEK_DATA/SEEK_HOLE and stores
// them as hole chunks (no blob), and a copy-up writes only data chunks, so a
// sparse terabyte costs what its data costs. Opening a workspace is O(1):
// directories of the base snapshot are loaded on first use (lazy.go).
//
// # Durability contract
//
// This is what the journal promises, and what its crash tests check:
//
//  1. An operation that returned is in the journal. Its metadata changes
//     are one record of the metadata log, written with pwrite(2) before the
//     call returns, and staging-file writes are pwrite(2)s; both survive
//     kill -9 of the process (they are in the kernel's page cache). Fsync
//     makes them survive power loss too: it fsyncs the staging file and
//     fdatasyncs the log.
//  2. After any crash the journal reopens consistent: every operation is a
//     single transaction (one log record, checksummed: a torn one is
//     dropped at replay), so the state is a prefix of the operations,
//     with no torn metadata, no dangling entries and correct link counts.
//     Open removes what a crash can leave behind: staging files of deleted
//     inodes and the state of an interrupted rollback.
//  3. Snapshot is a consistent cut (operations are serialised, so each is
//     wholly before or after it; the cut itself is O(1) under the lock, the
//     reading, chunking and packing run without it: cut.go) and is
//     O(changed): only directories on a
//     path to a change get new trees (dirty markers carry a generation, so
//     clearing the dirty set is one write), only changed files are read.
//     Blobs, then the snapshot record, then a pending marker, then the ref
//     (compare-and-swap), then the journal's records: a crash in between
//     reopens to the state before the snapshot or after it.
//  4. Rollback snapshots the state it discards first, then switches to a
//     fresh epoch based on the target snapshot: O(1) after that snapshot.
//
// # Full disk
//
// A full disk is ErrNoSpace (ENOSPC) to the writer, never a crash: Badger
// writes through mmap'd sparse files, where a missing block is SIGBUS, so
// the journal guards its disk (space.go). Ordinary writes stop while the
// disk has less free than Badger and a snapshot's bookkeeping may need;
// reads, removals, truncation, release, fsync and recording a snapshot go
// on from a reserve file the journal keeps, even when something else
// filled the disk; writes work again once space is freed. Badger is
// written only by the log's checkpoints, which wait while the disk is
// below the guard's line (the log keeps the records meanwhile, up to a
// bounded backlog, past which operations get ErrNoSpace), and a log append
// that finds the disk full is undone and refused with ErrNoSpace.
//
// # Concurrency
//
// A Journal serialises its operations with one mutex: transactions plus
// this lock make every operation atomic and the snapshot cut exact.
// A snapshot holds it only to cut and to record the result (cut.go): in
// between, operations go on, and one that would change the bytes of a
// file the snapshot has yet to read waits for that file only. One read
// takes no lock: GetXattr of an inode whose committed record has no xattrs
// (cache.go, xattrFree), which the kernel asks for twice per file written.
// Single-operation latency, not parallelism, is what an agent's tools feel;
// the benchmarks measure it.
//
// # Open files
//
// Open and Release (handle.go) count open handles: a file unlinked while
// open keeps its data until its last Release (and a crash deletes it at the
// next Open). A handle may carry a backing file, the inode's staging file,
// for FUSE passthrough; files open for writing through one are dirty while
// open, and take their size and mtime from the staging file, adopted by
// each operation on the file and by those that read every size (snapshot,
// status, statfs), never by scanning every writer on every request.
// CreateOpen (FUSE_CREATE) makes and opens a new file in one transaction,
// its empty staging file created just before it with one open(2).
//
// # Not yet
//
// Files are staged whole on first change (copy-up costs O(file) once):
// passthrough needs one backing file holding every byte, so staging only
// the touched ranges of a large file would cost it passthrough.
package journal
