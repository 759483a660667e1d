// Package tarfmt adds to archive/tar the one thing cairn needs and the
// standard library lacks: sparse files, in both directions, without ever
// reading or writing their holes.
//
// Writing: WriteSparse writes a regular file in GNU sparse format 1.0 (a PAX
// header with GNU.sparse.major=1, minor=0, name and realsize; the sparse map
// at the start of the entry's data, then the data fragments). archive/tar
// reads that format but its Writer drops GNU.sparse records, so the entry's
// blocks are written here, between entries of a tar.Writer (call its Flush
// first). GNU tar extracts such entries with holes.
//
// Reading: Reader wraps tar.Reader. For a sparse entry in any GNU format
// (1.0, 0.1, 0.0 or the old GNU 'S' type), Fragments returns its data
// fragments and ReadAt/Read read only the stored data, answering holes
// with zeros without touching the stream. tar.Reader does not expose sparse
// maps, so Reader records the header blocks tar.Reader reads in Next and
// parses the map from them; it then reads the fragments' bytes from the
// stream itself and lets tar.Reader skip them later without reading them
// again (see tap). Everything else (header formats, PAX records, long
// names, checksums) is archive/tar's.
//
// The archive is a stream: ReadAt's offsets must not decrease.
package tarfmt
