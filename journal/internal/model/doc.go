// Package model is an in-memory reference filesystem with exactly the
// journal's filesystem API: the specification package journal is tested
// against (journal/model_test.go). It models Linux as a FUSE server
// mounted with default_permissions sees it, and is itself checked against
// the kernel:
//
//   - TestLinux runs random operation sequences (as root and as two
//     unprivileged callers) on the model and on a fresh tmpfs, comparing
//     error classes, the whole tree (types, modes, owners, link counts,
//     sizes, contents, symlink targets, xattrs, hard-link identity) and
//     which timestamps each operation changed;
//   - TestLinuxPrivileges runs directed setuid/setgid scenarios;
//   - TestLinuxFileData checks data operations, ZERO_RANGE included (which
//     tmpfs lacks), on the filesystem under t.TempDir() (ext4 here).
//
// A Model is not safe for concurrent use. Each operation reads its clock
// once and uses that instant for every timestamp it sets. New inodes are
// numbered firstIno, firstIno+1, ... in the order of successful creations
// (a failed one takes no number); Clone copies the counter, SetNextIno
// moves it (a journal never reuses numbers across a rollback).
//
// # Semantics
//
// Link counts: a non-directory counts its names; a directory has 2 + its
// subdirectories (the root too). An inode goes away with its last name
// (the API has no open handles).
//
// Timestamps: creating an inode sets its three times; a change of a
// directory's entries sets its mtime and ctime; any change of an inode
// sets its ctime: SetAttr (always, even with nothing else to do; an
// explicit SetCtime wins), link and unlink of it, its own rename
// (rename and exchange set the moved inodes' ctime, not their mtime),
// xattr changes (even to the same value). Write, truncation (SetSize,
// even to the same size), every successful fallocate (KEEP_SIZE too) and
// copy_file_range into a file set mtime and ctime. A zero-length write,
// and a copy that copies nothing, change nothing. Nothing sets atime but
// creation and SetAttr: reads and directory listings behave as on a
// noatime mount.
//
// Setuid/setgid, as Linux 6.18 applies them (verified by TestLinuxPrivileges):
//
//   - write, truncate, fallocate and copy_file_range into a regular file by
//     an unprivileged caller clear setuid, and setgid when group-execute
//     is set or the caller is not in the file's group (file_remove_privs);
//     root keeps both;
//   - chown (SetUID or SetGID) of a non-directory clears setuid even when
//     root does it, and setgid when group-execute is set or, for an
//     unprivileged caller, when it is not in the file's old group;
//     directories keep both;
//   - chmod by an unprivileged caller outside the (new) group drops
//     setgid, directories included;
//   - mkdir keeps only the permission and sticky bits of its mode; a new
//     directory in a setgid directory gets the setgid bit and the parent's
//     group; a new non-directory there gets the parent's group and loses a
//     requested setgid (with group-execute) when the caller is not in that
//     group and unprivileged. Otherwise new inodes get the caller's uid
//     and gid, and the mode given (the kernel applied the umask).
//
// Sticky directories: removing or renaming away (or renaming over) an
// entry of a sticky directory takes root, the directory's owner or the
// entry's owner (ErrPermission, checked before the type errors); writing
// a "user." xattr of a sticky directory takes root or its owner.
//
// Names: "", ".", "..", '/' and NUL never reach a FUSE server; the model
// answers as the syscalls do: "" ErrNotFound, '/' or NUL ErrInvalid, more
// than NameMax bytes ErrNameTooLong; Lookup of "." is the directory and
// of ".." its parent (the root's is itself); creating "." or ".."
// (Create, Mknod, Mkdir, Symlink, Link) ErrExists; Unlink of them
// ErrIsDir; Rmdir of "." ErrInvalid and of ".." ErrNotEmpty; Rename of
// them ErrBusy (the new name with NOREPLACE: ErrExists).
//
// Order of checks: as the syscalls, parent directories first (ErrNotFound,
// ErrNotDir), then names, then the state. Exceptions taken from the
// syscalls: mknod checks its type first (a directory ErrPermission, a
// symlink ErrInvalid), symlink its target first (empty ErrNotFound, over
// SymlinkMax ErrNameTooLong), the xattr calls their flags, name (empty or
// over XattrNameMax: ErrRange) and value size (ErrTooBig) first, Read and
// Write a negative offset (ErrInvalid) before the file type. Rename's
// order is documented on Rename.
//
// Data: files are sparse; holes read as zeros. A write starting at or
// beyond FileSizeMax gives ErrFileTooBig and one crossing it is short.
// SEEK_DATA and SEEK_HOLE report no holes (POSIX allows it): for an offset
// inside the file, SEEK_DATA returns it and SEEK_HOLE the size; a
// negative offset or one at or beyond the end gives ErrNoSeekData.
//
// # Deliberate deviations from Linux
//
//   - No access checks: rwx permissions, ownership for chmod/chown/utimes,
//     CAP_MKNOD for device nodes and fs.protected_hardlinks are the
//     kernel's (default_permissions), so the differential test runs an
//     unprivileged operation only where the kernel would allow it.
//   - noatime: see above. Attributes stay deterministic and reads stay
//     reads.
//   - A directory's Size is DirSize (0): Linux filesystems disagree
//     (tmpfs 20 bytes per entry, ext4 its blocks), so it is not compared.
//   - No holes for SEEK_DATA/SEEK_HOLE (tmpfs reports holes: the
//     differential test only checks that Linux's answer lies in the range
//     the model allows).
//   - The journal's limits, which tmpfs lacks: LinkMax (ErrTooManyLinks
//     for Link, and for Mkdir or a directory moved into a directory at
//     LinkMax), FileSizeMax, XattrListMax (a name list beyond it:
//     ErrNoXattrSpace). Covered by unit tests.
//   - Errnos without a sentinel: fallocate on a FIFO, socket or device
//     (Linux ESPIPE, ENODEV) gives ErrNotSupported; a negative
//     copy_file_range offset (Linux EOVERFLOW) ErrInvalid; Read, Write,
//     Lseek and truncation of a symlink, FIFO, socket or device (never
//     forwarded to a filesystem) ErrInvalid. Reads of a directory give
//     ErrIsDir.
//   - RENAME_WHITEOUT is not supported: ErrInvalid, like unknown flags.
//   - security.capability is not dropped by writes and chown: the kernel
//     does it by sending a removexattr.
//   - Reads of "trusted." xattrs by unprivileged callers (ErrNoData on
//     Linux) are not modelled: reads carry no caller. ListXattr lists
//     every name.
//   - SetAttr with SetMode and SetUID/SetGID together applies the mode as
//     given (no syscall combines them; with FUSE the kernel sends the mode
//     it computed). SetAttr without SetUID/SetGID clears nothing, where
//     Linux's chown(f, -1, -1) clears setuid (FUSE sends that as a mode
//     change).
//
// Linux behaviours found by the differential test and now modelled
// (worth knowing when reading journal failures): the chown and setgid
// rules above; mkdir dropping setuid/setgid; fallocate KEEP_SIZE setting
// mtime/ctime and clearing setuid; PUNCH_HOLE without KEEP_SIZE being
// EOPNOTSUPP (not EINVAL); copy_file_range cutting the count at the
// source's end before checking for overlap (so an "overlapping" copy from
// the end of a file succeeds with 0 bytes); chmod of a symlink giving
// EOPNOTSUPP; setxattr with both CREATE and REPLACE being valid (EEXIST
// or ENODATA); "user." xattrs existing only on regular files and
// directories; "trusted." and "security." writes needing privilege; the
// name "user." alone giving EINVAL; SEEK_DATA at a negative offset giving
// ENXIO; unlink of a directory giving EISDIR.
package model
