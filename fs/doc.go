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
//
// # Id-mapped mounts and the caller
//
// With Options.IDMap the server declares FUSE_ALLOW_IDMAP (Linux 6.12; an
// older kernel ignores it and the mount serves as without it: IDMapped
// says which), so that the mount may be bound id-mapped (mount_setattr
// MOUNT_ATTR_IDMAP), as the sandbox binds a workspace through its user
// namespace: stored uid 0 is then the sandbox's root, and what that root
// creates is stored as uid 0. The kernel checks permissions against the
// mapped owners itself (default_permissions).
//
// The price is in the request headers. Once a server declares
// FUSE_ALLOW_IDMAP, the kernel puts the caller's fsuid and fsgid (mapped
// through the bind's id mapping) only in the requests that create an
// inode: MKNOD, MKDIR, SYMLINK, CREATE (and TMPFILE, RENAME2 with
// WHITEOUT, which cairn does not serve). Every other request, through
// every mount of the server, id-mapped or not, carries
// FUSE_INVALID_UIDGID (4294967295); only the pid is left (TestKernelHeaders
// shows both). The journal's rules that depend on the caller (the sticky
// bit on unlink, rmdir and rename; setgid kept by chmod and chown;
// setuid and setgid cleared by write, truncate, fallocate and
// copy_file_range; trusted.* and security.* xattrs) would then see nobody
// they know.
//
// So a request without ids gets them from /proc/<pid>/status of the
// thread that made it (the fsuid and fsgid, fourth fields of Uid: and
// Gid:, and Groups:), cached per thread for a second (credsTTL: a process
// that changes its credentials, or a pid reused by a new process, may be
// judged by the old ones for that long). Host ids in
// [IDMapBase, IDMapBase+IDMapSize) are a sandbox's, whose processes reach
// the workspace only through the id-mapped bind: they are translated back
// (id - IDMapBase), as the bind maps them, and such a process's ids outside
// the range (which it cannot name) are dropped. Other ids are the host's,
// whose processes use the plain mount, and are kept. The translation is
// only right for processes that follow that rule: a host process running
// with an id in the range (a rootless container's, say) counts as the
// sandbox id it matches, and a sandbox given a plain bind of a mount that
// declared FUSE_ALLOW_IDMAP (the sandbox falls back to one only when the
// kernel refuses the mapping, which it does not for such a mount) would
// store its files as host ids and be judged as workspace ids. The kernel's
// own checks (permissions, sticky directories, trusted.* xattrs, the
// setgid bit of chmod) are made with the process's real credentials
// first, so a wrong guess here weakens only what the journal decides
// alone: which of setuid and setgid survive a write, truncate or chown.
//
// The caller is nobody (uid and gid 65534, no groups: no privilege) when
// its thread cannot be found: the kernel sends pid 0 for a process in a
// pid namespace the daemon cannot see (an ancestor's or a sibling's, as
// when the daemon runs in a container of its own: mount without IDMap
// there), and the thread may be gone by the time the request is served
// (a process killed while its request waits). Then the journal refuses
// an unlink or rename in a sticky directory (but of nobody's files) and a
// trusted.* or security.* xattr change, drops setgid on chmod, and clears
// setuid and setgid on write and truncate: the decisions fail closed. Requests the kernel makes on its own (release, forget, and
// writeback, which cairn does not enable) pass no caller to the journal.
//
// Without IDMap every header has ids and nothing of this happens; with it,
// the cost is a cache lookup per request that needs a caller, and about
// 5 µs (one read of /proc) per thread and second (BenchmarkIDMap,
// BenchmarkReadCreds).
//
// # What the kernel caches, and when it is dropped
//
// Names, attributes and negative lookups are cached for Options.Timeout;
// a directory's listing (FOPEN_CACHE_DIR and FOPEN_KEEP_CACHE) and, without
// passthrough, file pages (FOPEN_KEEP_CACHE) until they change. Changes made
// through the mount the kernel sees itself: it drops the names and
// attributes involved, and restarts a directory's listing cache at the next
// opendir or rewinddir after a create, unlink, rename or link in it. That
// cache is one per directory, filled from the READDIR replies of whichever
// handle reads, so every reply is the directory as it is at that moment:
// a handle's listing is read again at offset 0 and after any change to
// the directory, and offsets are cookies made from the names (dirCookies),
// which stay valid from one listing to the next. Changes the journal makes
// by itself (restore, rollback) reach the kernel through the Invalidator
// (FUSE notifications: an entry, an inode's attributes and every page of it,
// which for a directory is its cached listing, or all of them). After a
// rollback an inode number may name another file than the one an open
// handle holds: lookups then carry a new generation (journal.Generation),
// and the kernel replaces its inode (the old handles fail with EIO from
// then on, ESTALE before) instead of serving the old file's pages and
// backing file under the new name.
//
// # Writes the kernel holds
//
// There is no writeback cache: a write(2) reaches the daemon (or the
// backing file) before it returns. Only pages dirtied through a shared
// mapping of a file open for writing without passthrough stay in the
// kernel until it writes them back, so a commit first flushes those files
// (KernelMayHoldWrites lists them). syncfs(2) does not do it: the kernel
// sends the WRITEs of its write-back as background requests and returns
// without waiting for their answers. fsync(2) of each file waits for them
// (WaitWriteback, which opens the inode by its file handle). It makes
// requests to the mount, so the daemon runs it in a helper process, never
// on one of its own threads, and answers that helper's FSYNCs at once
// (FlushHelper): the wait in the kernel is all they are for.
package fs
