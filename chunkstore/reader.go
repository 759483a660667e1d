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
//
// From a remote store, a reader that reads chunks in order fetches the
// following ones in the background, up to Options.ReadAhead bytes ahead,
// with coalesced GETs; a read out of order fetches its chunk with the
// pack's neighbouring data chunks instead (see fetch.go).
type FileReader struct {
	s      *Store
	ctx    context.Context
	chunks []ChunkRef
	starts []uint64 // starts[i] is the file offset of chunks[i]
	size   uint64

	mu      sync.Mutex
	lastIdx int // one-chunk cache for sequential reads
	last    []byte
	// Read-ahead.
	next  int           // the chunk a sequential reader reads next
	run   uint64        // file offset where the current sequential run began
	ahead map[ID][]byte // chunks fetched ahead and not read yet
	front int           // read-ahead has asked for the chunks before front
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
	f := &FileReader{s: s, ctx: ctx, chunks: chunks, starts: make([]uint64, len(chunks)), lastIdx: -1, ahead: make(map[ID][]byte)}
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

// readAheadMin is the read-ahead window of a reader that has just started
// reading in order.
const readAheadMin = 1 << 20

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
	seq := i == f.next
	if !seq {
		f.run = f.starts[i]
	}
	f.next = i + 1
	data, ok := f.ahead[ref.ID]
	if ok {
		delete(f.ahead, ref.ID)
	} else if !seq && len(f.ahead) > 0 {
		// A jump: what was read ahead will not be read.
		clear(f.ahead)
		f.front = i + 1
	}
	ahead := (seq || ok) && f.readAheadLocked(i)
	f.mu.Unlock()
	if ok {
		f.s.rd.hits.Add(1)
	} else {
		// Read ahead or not, the chunk itself: with its neighbours in the
		// pack unless the read-ahead is bringing the following chunks.
		var err error
		if _, data, err = f.s.readBlob(f.ctx, ref.ID, !ahead); err != nil {
			return nil, err
		}
		f.mu.Lock()
		delete(f.ahead, ref.ID) // if the read-ahead brought it too
		f.mu.Unlock()
	}
	if uint64(len(data)) != ref.Size {
		return nil, fmt.Errorf("%w: chunk %s is %d bytes, the file's chunk list says %d", ErrCorrupt, ref.ID.Short(), len(data), ref.Size)
	}
	f.mu.Lock()
	f.lastIdx, f.last = i, data
	f.mu.Unlock()
	return data, nil
}

// readAheadLocked starts fetching the chunks after i in the background,
// unless half the window is asked for already: batches are at least half a
// window, so GETs stay large however fast the reader is, and at most about
// two windows are in flight (a reader passes the chunks asked for only once
// they have arrived). The window is four times the bytes read in order so
// far, from readAheadMin up to Options.ReadAhead, so that short runs of a
// random reader fetch little they do not need. It reports whether a
// read-ahead covers the chunks after i. Called with f.mu held.
func (f *FileReader) readAheadLocked(i int) bool {
	rd := f.s.rd
	if !rd.remote || f.s.opts.ReadAhead <= 0 || i+1 >= len(f.chunks) {
		return false
	}
	window := min(uint64(f.s.opts.ReadAhead), max(readAheadMin, 4*(f.starts[i]-f.run)))
	f.front = max(f.front, i+1)
	if f.front == len(f.chunks) || f.starts[f.front]-f.starts[i+1] > window/2 {
		return true
	}
	end := f.front
	var ids []ID
	for end < len(f.chunks) && f.starts[end]-f.starts[i+1] < window {
		if !f.chunks[end].IsHole() {
			ids = append(ids, f.chunks[end].ID)
		}
		end++
	}
	f.front = end
	// Claimed now, so that the reader waits for these GETs rather than
	// racing them. Chunks the index does not know are left to the reader.
	plan := f.s.planFetch(f.ctx, ids, false)
	rd.claimAll(&plan)
	if len(plan.runs) == 0 {
		return true
	}
	ok := rd.spawn(func() {
		// Bounded by the reader's context and the store's life.
		ctx, cancel := context.WithCancel(f.ctx)
		defer cancel()
		defer context.AfterFunc(f.s.ctx, cancel)()
		f.s.fetchPlan(ctx, plan, func(id ID, data []byte) {
			f.mu.Lock()
			f.ahead[id] = data
			f.mu.Unlock()
		})
	})
	if !ok {
		rd.abandon(plan)
	}
	return ok
}
