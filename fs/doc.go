// Package fs serves a journal over FUSE (go-fuse's raw protocol API). It
// translates requests into journal calls and the journal's sentinel errors
// into errnos (Errno, the one mapping in cairn); all POSIX semantics live in
// package journal.
//
// FUSE node IDs are journal inode numbers (the root is 1 in both), so the
// adapter keeps no inode table of its own, only lookup counts for
// invalidation and the backing files it registered.
//
// Speed comes from the kernel doing the work (mount.go): FUSE passthrough
// (a file's staging file is handed to the kernel, which then reads and
// writes it without a round trip through the daemon), long entry and
// attribute timeouts with explicit invalidation (the daemon is the only
// writer of its workspace), cached negative lookups, READDIRPLUS, 1 MiB
// writes, and HANDLE_KILLPRIV_V2 (the journal clears setuid/setgid itself,
// so the kernel sends no GETXATTR before each write).
package fs
