package chunkstore

// Chunk list format, version 1: part of a large file's content, stored as a
// KindChunkList blob and referenced from its tree entry by a ChunkListRef.
// Canonical like trees (see tree.go for the notation); DecodeChunkList
// refuses anything EncodeChunkList would not produce.
//
//	magic    4 bytes   "CLST"
//	version  1 byte    1
//	count    uvarint   1..4096 (ChunkListMax), then count chunks in file order:
//	  id       32 bytes  the chunk's blob ID; the zero ID is a hole (zeros, no blob)
//	  size     uvarint   plaintext bytes, >= 1
//	nothing follows the last chunk; the sizes' sum fits in 64 bits.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	chunkListMagic   = "CLST"
	chunkListVersion = 1

	// ChunkListMax is the most chunks one chunk-list blob holds, and the
	// most an entry holds directly in Entry.Chunks.
	ChunkListMax = 4096

	// DirectChunksMax is the default threshold of SplitChunks: a file of at
	// most this many chunks keeps them in its tree entry.
	DirectChunksMax = 64
)

// ChunkList is the content of one KindChunkList blob: 1..ChunkListMax chunks.
type ChunkList struct {
	Chunks []ChunkRef
}

// ChunkListRef is a tree entry's reference to a chunk-list blob.
type ChunkListRef struct {
	ID    ID
	Size  uint64 // plaintext bytes the list covers
	Count uint32 // chunks in the list
}

// Size returns the plaintext bytes l covers.
func (l *ChunkList) Size() uint64 {
	var n uint64
	for _, c := range l.Chunks {
		n += c.Size
	}
	return n
}

// Ref returns the reference to l stored under id, for Entry.ChunkLists.
func (l *ChunkList) Ref(id ID) ChunkListRef {
	return ChunkListRef{ID: id, Size: l.Size(), Count: uint32(len(l.Chunks))}
}

// SplitChunks decides how a regular file's chunks are stored in its tree
// entry. The rule (format version 1):
//
//   - a file of at most directMax chunks keeps them in the entry: direct is
//     chunks (possibly empty) and lists is nil;
//   - a longer file's chunks go into chunk-list blobs: lists holds runs of
//     ChunkListMax chunks in file order, the last run holding the rest, and
//     direct is nil.
//
// directMax <= 0 means DirectChunksMax, the value the store uses; values
// above ChunkListMax are treated as ChunkListMax. The returned slices share
// chunks' backing array (capacity-limited, so appending to one is safe).
//
// Keeping big lists in separate blobs keeps the tree small (a directory is
// decoded on every cold lookup) and lets an appended-to large file share
// its unchanged full lists with the previous version.
func SplitChunks(chunks []ChunkRef, directMax int) (direct []ChunkRef, lists [][]ChunkRef) {
	if directMax <= 0 {
		directMax = DirectChunksMax
	}
	directMax = min(directMax, ChunkListMax)
	if len(chunks) <= directMax {
		return chunks, nil
	}
	lists = make([][]ChunkRef, 0, (len(chunks)+ChunkListMax-1)/ChunkListMax)
	for len(chunks) > 0 {
		n := min(len(chunks), ChunkListMax)
		lists = append(lists, chunks[:n:n])
		chunks = chunks[n:]
	}
	return nil, lists
}

// EncodeChunkList returns the canonical encoding of l. It refuses
// (ErrInvalid) an empty list, more than ChunkListMax chunks, chunks of size
// 0, and sizes whose sum overflows.
func EncodeChunkList(l *ChunkList) ([]byte, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: encode chunk list: nil list", ErrInvalid)
	}
	if len(l.Chunks) == 0 {
		return nil, fmt.Errorf("%w: encode chunk list: no chunks", ErrInvalid)
	}
	if _, err := checkChunkRefs(l.Chunks); err != nil {
		return nil, fmt.Errorf("%w: encode chunk list: %v", ErrInvalid, err)
	}
	buf := make([]byte, 0, len(chunkListMagic)+1+binary.MaxVarintLen16+len(l.Chunks)*(IDSize+binary.MaxVarintLen64))
	buf = append(buf, chunkListMagic...)
	buf = append(buf, chunkListVersion)
	return appendChunkRefs(buf, l.Chunks), nil
}

// DecodeChunkList decodes and validates an encoded chunk list: ErrCorrupt
// for anything EncodeChunkList would not produce, ErrVersion for a format
// version this build does not know.
func DecodeChunkList(data []byte) (*ChunkList, error) {
	c := cursor{buf: data, what: "chunk list"}
	c.header(chunkListMagic, chunkListVersion)
	n := c.count("chunk count", IDSize+1)
	switch {
	case n == 0:
		c.fail("no chunks")
	case n > ChunkListMax:
		c.fail("%d chunks (max %d)", n, ChunkListMax)
	}
	if c.err != nil {
		return nil, c.err
	}
	l := &ChunkList{Chunks: make([]ChunkRef, n)}
	for i := range l.Chunks {
		l.Chunks[i].ID = c.id("chunk ID")
		l.Chunks[i].Size = c.uvarint("chunk size")
	}
	c.end()
	if c.err == nil {
		if _, err := checkChunkRefs(l.Chunks); err != nil {
			c.fail("%v", err)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return l, nil
}

// appendChunkRefs appends a count and the refs (the layout shared by chunk
// lists and a tree entry's direct chunks).
func appendChunkRefs(buf []byte, refs []ChunkRef) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(refs)))
	for _, r := range refs {
		buf = append(buf, r.ID[:]...)
		buf = binary.AppendUvarint(buf, r.Size)
	}
	return buf
}

// checkChunkRefs validates a run of refs and returns their total size.
func checkChunkRefs(refs []ChunkRef) (uint64, error) {
	if len(refs) > ChunkListMax {
		return 0, fmt.Errorf("%d chunks (max ChunkListMax = %d); use SplitChunks", len(refs), ChunkListMax)
	}
	var total uint64
	for i, r := range refs {
		if r.Size == 0 {
			return 0, fmt.Errorf("chunk %d has size 0", i)
		}
		var ok bool
		if total, ok = addSize(total, r.Size); !ok {
			return 0, errors.New("chunk sizes overflow 64 bits")
		}
	}
	return total, nil
}
