package journal

import (
	"github.com/cairnfs/cairn/chunkstore"
)

// Ino is an inode number. Inode numbers are stable for the life of a
// workspace: they are recorded in snapshot trees and restored from them.
type Ino uint64

// RootIno is the workspace root directory's inode.
const RootIno Ino = 1

// Limits of the journal's namespace.
const (
	NameMax      = 255      // bytes in one name
	SymlinkMax   = 4095     // bytes in a symlink target
	XattrNameMax = 255      // bytes in an xattr name
	XattrSizeMax = 64 << 10 // bytes in one xattr value
	XattrListMax = 64 << 10 // bytes in the NUL-separated list of an inode's xattr names
	LinkMax      = 65000    // hard links to one inode
	FileSizeMax  = 1 << 43  // bytes in one file (8 TiB, within what ext4, the usual staging filesystem, holds)
)

// Type is a file type; the same values as chunkstore.EntryType.
type Type = chunkstore.EntryType

// File types.
const (
	TypeRegular  = chunkstore.TypeRegular
	TypeDir      = chunkstore.TypeDir
	TypeSymlink  = chunkstore.TypeSymlink
	TypeFIFO     = chunkstore.TypeFIFO
	TypeSocket   = chunkstore.TypeSocket
	TypeCharDev  = chunkstore.TypeCharDev
	TypeBlockDev = chunkstore.TypeBlockDev
)

// Mode bits beyond the permission bits.
const (
	ModeSetuid = 0o4000
	ModeSetgid = 0o2000
	ModeSticky = 0o1000
	ModePerm   = 0o7777 // every bit Attr.Mode may hold
)

// Attr is an inode's attributes (stat(2) data).
type Attr struct {
	Ino   Ino
	Type  Type
	Mode  uint32 // permission bits incl. suid/sgid/sticky (ModePerm); no type bits
	UID   uint32
	GID   uint32
	Size  uint64
	Nlink uint32
	Rdev  uint64
	Atime int64 // nanoseconds since the Unix epoch
	Mtime int64
	Ctime int64
}

// DirEntry is one directory entry as ReadDir returns it.
type DirEntry struct {
	Name string
	Ino  Ino
	Type Type
}

// Caller is who performs an operation, as the kernel reports it.
type Caller struct {
	UID, GID uint32
	// Groups are the supplementary groups, when known.
	Groups []uint32
}

// Privileged reports whether the caller is root (holds CAP_FSETID,
// CAP_FOWNER, CAP_CHOWN in the workspace's view).
func (c Caller) Privileged() bool { return c.UID == 0 }

// InGroup reports whether gid is the caller's group or a supplementary one.
func (c Caller) InGroup(gid uint32) bool {
	if c.GID == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// Root is the root caller.
var Root = Caller{}

// SetAttrValid says which fields of SetAttrIn to apply.
type SetAttrValid uint32

// Fields of SetAttrIn.
const (
	SetMode SetAttrValid = 1 << iota
	SetUID
	SetGID
	SetSize
	SetAtime    // to SetAttrIn.Atime
	SetAtimeNow // to the current time (UTIME_NOW)
	SetMtime
	SetMtimeNow
	SetCtime // explicit ctime (only restore paths use it)
)

// SetAttrIn is a setattr request: chmod, chown, truncate, utimensat.
// Fields not named in Valid are ignored (UTIME_OMIT).
type SetAttrIn struct {
	Valid SetAttrValid
	Mode  uint32 // permission bits (ModePerm)
	UID   uint32
	GID   uint32
	Size  uint64
	Atime int64 // ns
	Mtime int64
	Ctime int64
}

// RenameFlags are renameat2(2)'s flags.
type RenameFlags uint32

// Rename flags.
const (
	RenameNoReplace RenameFlags = 1 << 0 // RENAME_NOREPLACE
	RenameExchange  RenameFlags = 1 << 1 // RENAME_EXCHANGE
)

// XattrFlags are setxattr(2)'s flags.
type XattrFlags uint32

// Xattr flags.
const (
	XattrCreate  XattrFlags = 1 // XATTR_CREATE: fail with ErrExists if present
	XattrReplace XattrFlags = 2 // XATTR_REPLACE: fail with ErrNoData if absent
)

// FallocMode is fallocate(2)'s mode.
type FallocMode uint32

// Fallocate modes (the Linux values).
const (
	FallocKeepSize  FallocMode = 0x01 // FALLOC_FL_KEEP_SIZE
	FallocPunchHole FallocMode = 0x02 // FALLOC_FL_PUNCH_HOLE (requires KEEP_SIZE)
	FallocZeroRange FallocMode = 0x10 // FALLOC_FL_ZERO_RANGE
)

// Whence values for Lseek beyond SEEK_SET/CUR/END, which the kernel handles.
const (
	SeekData = 3 // SEEK_DATA
	SeekHole = 4 // SEEK_HOLE
)

// StatFs is statfs(2) data for the workspace.
type StatFs struct {
	Blocks, Bfree, Bavail uint64 // in units of Bsize
	Files, Ffree          uint64
	Bsize                 uint32
	NameLen               uint32
}

// Invalidator drops kernel caches when the journal changes the tree by
// itself (rollback, restore). Package fs implements it with FUSE notify.
type Invalidator interface {
	// InvalidateEntry drops the cached lookup of name in parent.
	InvalidateEntry(parent Ino, name string)
	// InvalidateInode drops an inode's cached attributes and data.
	InvalidateInode(ino Ino)
	// InvalidateAll drops every cached entry, attribute and page: the
	// whole tree changed (rollback).
	InvalidateAll()
}

// Status is a journal's state for operators (`cairn status`).
type Status struct {
	Workspace   string
	Base        chunkstore.ID // the snapshot the live state derives from (zero: none)
	Seq         uint64        // its sequence number
	DirtyInodes int           // inodes changed since Base
	DirtyBytes  uint64        // bytes of the changed regular files
	Files       uint64        // regular files
	Bytes       uint64        // their total size
	Inodes      uint64        // all inodes, the root included
	OpenFiles   int           // open handles' inodes
}
