// Package snapio moves whole snapshots in and out of a store as ordinary
// file trees: Export writes a snapshot as a tar archive, ImportDir and
// ImportTar build a new workspace's first snapshot from a directory or a
// tar archive. Both work on the store directly (no journal, no mount).
//
// Everything a tree entry holds crosses over: type, mode with
// setuid/setgid/sticky, numeric owners, atime/mtime/ctime in nanoseconds,
// xattrs (binary values included), hardlinks, symlinks, FIFOs, devices,
// empty directories, the root directory's own attributes, and holes: a
// sparse file is read and written without its holes (GNU sparse 1.0 in
// tar archives, via package tarfmt; SEEK_DATA/SEEK_HOLE in directories).
// A tar archive cannot hold a socket: Export leaves sockets out and says
// so. Import assigns fresh inode numbers (1 is the root; hardlinks share
// one) in tree order, so the same input gives the same trees.
//
// Import holds the tree's metadata, and the bytes of files small enough to
// be inlined in their tree entries, in memory until it writes the trees:
// hardlink counts are only known once the whole input has been read.
package snapio
