package chunkstore

import "fmt"

// BlobKind says what a blob holds. It is recorded in pack trailers and index
// files so that tools (GC, fsck) can walk a store without decoding every blob.
type BlobKind uint8

const (
	// KindData is a content-defined chunk of file data.
	KindData BlobKind = 1
	// KindTree is one encoded directory (see Tree).
	KindTree BlobKind = 2
	// KindChunkList is part of a large file's chunk list (see ChunkList).
	KindChunkList BlobKind = 3
	// KindChanges is a snapshot's list of changed paths, when too long to
	// keep in the record (see Snapshot.ChangesBlob).
	KindChanges BlobKind = 4
)

func (k BlobKind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindTree:
		return "tree"
	case KindChunkList:
		return "chunklist"
	case KindChanges:
		return "changes"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a known kind.
func (k BlobKind) Valid() bool { return k >= KindData && k <= KindChanges }

// ChunkRef is one piece of a file's content, in file order. A zero ID means a
// hole: Size bytes that read as zeros and have no blob behind them.
type ChunkRef struct {
	ID   ID
	Size uint64 // plaintext bytes
}

// IsHole reports whether r is a hole rather than a stored chunk.
func (r ChunkRef) IsHole() bool { return r.ID.IsZero() }
