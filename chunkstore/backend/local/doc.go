// Package local is the zero-configuration store backend: objects are files in
// a directory tree on local disk, one file per key.
//
// Durability: Put writes a temporary file next to the target, fsyncs it,
// renames it over the key and fsyncs the directory, so an object is either
// wholly present or absent after a crash, and present once Put returned.
//
// Conditional puts (refs, config) are serialised by an flock(2) on a lock file
// at the root, so they are linearizable across goroutines and processes on
// this machine. The lock is held only around the final compare-and-rename.
// ETags of objects up to 1 MiB are a hash of the content; larger objects'
// ETags come from the file's inode, size and mtime, which change with every
// Put because every Put renames a new file into place.
//
// The directory must be on a local filesystem: flock over NFS is not reliable.
package local
