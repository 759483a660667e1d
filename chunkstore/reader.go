package chunkstore

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
)

// FileReader reads a stored file's content at any offset. Holes read as
// zeros; every chunk is verified against its ID. Safe for concurrent use.
type FileReader struct {
	s      *Store
	ctx    context.Context
	chunks []ChunkRef
	starts []uint64 // starts[i] is the file offset of chunks[i]
	size   uint64

	mu      sync.Mutex
	lastIdx int // one-chunk cache for sequential reads
	last    []byte
}

// OpenFile returns a reader for c, loading its chunk-list blobs. ctx bounds
// every read made through the reader.
func (s *Store) OpenFile(ctx context.Context, c FileContent) (*FileReader, error) {
	chunks := c.Chunks
	if len(c.ChunkLists) > 0 {
		chunks = append([]ChunkRef(nil), c.Chunks...)
		for _, l := range c.ChunkLists {
			data, err := s.Blob(ctx, l.ID)
			if err != nil {
				return nil, fmt.Errorf("chunk list: %w", err)
			}
			cl, err := DecodeChunkList(data)
			if err != nil {
				return nil, fmt.Errorf("chunk list %s: %w", l.ID.Short(), err)
			}
			var n uint64
			for _, ch := range cl.Chunks {
				n += ch.Size
			}
			if len(cl.Chunks) != int(l.Count) || n != l.Size {
				return nil, fmt.Errorf("%w: chunk list %s holds %d chunks of %d bytes, its reference says %d of %d", ErrCorrupt, l.ID.Short(), len(cl.Chunks), n, l.Count, l.Size)
			}
			chunks = append(chunks, cl.Chunks...)
		}
	}
	f := &FileReader{s: s, ctx: ctx, chunks: chunks, starts: make([]uint64, len(chunks)), lastIdx: -1}
	for i, ch := range chunks {
		f.starts[i] = f.size
		f.size += ch.Size
	}
	if f.size != c.Size {
		return nil, fmt.Errorf("%w: file content: chunks add up to %d bytes, size says %d", ErrCorrupt, f.size, c.Size)
	}
	return f, nil
}

// Size returns the file's length.
func (f *FileReader) Size() int64 { return int64(f.size) }

// ChunkSizes returns the sizes of the file's chunks (holes included), in
// file order.
func (f *FileReader) ChunkSizes() []uint64 {
	sizes := make([]uint64, len(f.chunks))
	for i, c := range f.chunks {
		sizes[i] = c.Size
	}
	return sizes
}

// ReadAt implements io.ReaderAt.
func (f *FileReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset", ErrInvalid)
	}
	n := 0
	for n < len(p) {
		pos := uint64(off) + uint64(n)
		if pos >= f.size {
			return n, io.EOF
		}
		i := f.index(pos)
		if f.chunks[i].IsHole() {
			end := min(uint64(len(p)-n), f.starts[i]+f.chunks[i].Size-pos)
			clear(p[n : n+int(end)])
			n += int(end)
			continue
		}
		data, err := f.chunk(i)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], data[pos-f.starts[i]:])
	}
	return n, nil
}

// index returns the index of the chunk holding offset pos (< size).
func (f *FileReader) index(pos uint64) int {
	return sort.Search(len(f.starts), func(i int) bool { return f.starts[i] > pos }) - 1
}

// WriteTo implements io.WriterTo: the whole file in order, holes as zeros.
func (f *FileReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for i, ref := range f.chunks {
		if ref.IsHole() {
			for left := ref.Size; left > 0; {
				n, err := w.Write(zeroChunk[:min(left, uint64(len(zeroChunk)))])
				total += int64(n)
				left -= uint64(n)
				if err != nil {
					return total, err
				}
			}
			continue
		}
		data, err := f.chunk(i)
		if err != nil {
			return total, err
		}
		n, err := w.Write(data)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// WriteDataTo writes the file's data chunks to w at their offsets and skips
// its holes: w must read as zeros there already (a new or truncated file
// does). It returns the number of data bytes written.
func (f *FileReader) WriteDataTo(w io.WriterAt) (int64, error) {
	var total int64
	for i, ref := range f.chunks {
		if ref.IsHole() {
			continue
		}
		data, err := f.chunk(i)
		if err != nil {
			return total, err
		}
		n, err := w.WriteAt(data, int64(f.starts[i]))
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Seek returns the first offset at or after off that is in data (hole
// false) or in a hole (hole true), as lseek's SEEK_DATA and SEEK_HOLE do:
// the end of the file counts as a hole, and ok is false when off is at or
// past the end, or no data follows off.
func (f *FileReader) Seek(off uint64, hole bool) (pos uint64, ok bool) {
	if off >= f.size {
		return 0, false
	}
	for i := f.index(off); i < len(f.chunks); i++ {
		if f.chunks[i].IsHole() == hole {
			return max(off, f.starts[i]), true
		}
	}
	if hole {
		return f.size, true
	}
	return 0, false
}

var zeroChunk = make([]byte, 1<<20)

func (f *FileReader) chunk(i int) ([]byte, error) {
	ref := f.chunks[i]
	if ref.IsHole() { // callers handle holes themselves; this is for safety
		return nil, fmt.Errorf("%w: chunk %d is a hole", ErrInvalid, i)
	}
	f.mu.Lock()
	if f.lastIdx == i {
		data := f.last
		f.mu.Unlock()
		return data, nil
	}
	f.mu.Unlock()
	data, err := f.s.Blob(f.ctx, ref.ID)
	if err != nil {
		return nil, err
	}
	if uint64(len(data)) != ref.Size {
		return nil, fmt.Errorf("%w: chunk %s is %d bytes, the file's chunk list says %d", ErrCorrupt, ref.ID.Short(), len(data), ref.Size)
	}
	f.mu.Lock()
	f.lastIdx, f.last = i, data
	f.mu.Unlock()
	return data, nil
}
