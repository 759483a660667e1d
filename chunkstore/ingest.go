package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/cairnfs/cairn/chunkstore/cdc"
)

// FileContent is where a regular file's bytes live in the store: either a
// direct chunk list, or (for large files) chunk-list blobs. Size is the file
// length: the sum of the chunk sizes.
type FileContent struct {
	Size       uint64
	Chunks     []ChunkRef
	ChunkLists []ChunkListRef
}

// chunkJob is one chunk handed to the store's workers to hash, dedupe,
// compress and pack.
type chunkJob struct {
	ctx  context.Context
	buf  *[]byte // pooled copy of the chunk
	ref  *ChunkRef
	call *ingestCall
}

// ingestCall collects the outcome of one PutFile's jobs.
type ingestCall struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	err  error
	refs []*ChunkRef
}

func (c *ingestCall) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

var chunkBufs = sync.Pool{New: func() any { return new([]byte) }}

func (s *Store) worker() {
	defer s.workerWG.Done()
	for j := range s.jobs {
		data := *j.buf
		id := s.hasher.Sum(data)
		*j.ref = ChunkRef{ID: id, Size: uint64(len(data))}
		if _, err := s.putBlobID(j.ctx, KindData, id, data); err != nil {
			j.call.fail(err)
		}
		chunkBufs.Put(j.buf)
		j.call.wg.Done()
		// A chunk is about a millisecond of hashing and compression. A
		// mount serves its requests while it snapshots: yield the
		// processor between chunks, so that a request goroutine waits
		// for one chunk, not for the scheduler's 10 ms preemption, on
		// every hand-off (FUSE reader, journal, Badger's writer).
		runtime.Gosched()
	}
}

// PutFile chunks r with the store's content-defined chunker and stores every
// chunk (deduplicated, compressed, packed). Chunks of one file are hashed and
// compressed in parallel by the store's workers; callers ingesting many small
// files get parallelism by calling PutFile from several goroutines. The
// content is durable once a later Flush returns.
func (s *Store) PutFile(ctx context.Context, r io.Reader) (FileContent, error) {
	chunks, size, err := s.putChunks(ctx, r)
	if err != nil {
		return FileContent{}, err
	}
	return s.fileContent(ctx, chunks, size)
}

// Range is a byte range of a file: Len bytes from Off.
type Range struct{ Off, Len uint64 }

// sparseMinHole is the shortest gap between data ranges that PutSparseFile
// stores as a hole; shorter gaps are stored as data (zeros), so that a
// file-system's block-sized holes do not cut the file into tiny chunks.
const sparseMinHole = 64 << 10

// PutSparseFile stores a sparse file of size bytes: r holds its bytes, and
// data lists where they may be non-zero (sorted, not overlapping, within
// size; what lseek(SEEK_DATA/SEEK_HOLE) reports). Everything else is stored
// as holes: no blob, no bytes read, read back as zeros. Each data range is
// chunked on its own, so equal ranges dedupe wherever they sit.
func (s *Store) PutSparseFile(ctx context.Context, r io.ReaderAt, size uint64, data []Range) (FileContent, error) {
	var merged []Range
	var pos uint64
	for i, d := range data {
		if d.Len == 0 {
			continue
		}
		end, ok := addSize(d.Off, d.Len)
		if !ok || d.Off < pos || end > size {
			return FileContent{}, fmt.Errorf("%w: data range %d [%d, +%d) is out of order or past the file's %d bytes", ErrInvalid, i, d.Off, d.Len, size)
		}
		if k := len(merged) - 1; k >= 0 && d.Off-(merged[k].Off+merged[k].Len) < sparseMinHole {
			merged[k].Len = end - merged[k].Off
		} else {
			merged = append(merged, d)
		}
		pos = end
	}
	var chunks []ChunkRef
	pos = 0
	for _, d := range merged {
		if d.Off > pos {
			chunks = append(chunks, ChunkRef{Size: d.Off - pos})
		}
		refs, n, err := s.putChunks(ctx, io.NewSectionReader(r, int64(d.Off), int64(d.Len)))
		if err != nil {
			return FileContent{}, err
		}
		if n != d.Len {
			return FileContent{}, fmt.Errorf("read file content: %d bytes at %d, expected %d: %w", n, d.Off, d.Len, io.ErrUnexpectedEOF)
		}
		chunks = append(chunks, refs...)
		pos = d.Off + d.Len
	}
	if size > pos {
		chunks = append(chunks, ChunkRef{Size: size - pos})
	}
	return s.fileContent(ctx, chunks, size)
}

// putChunks chunks r and stores every chunk, returning the chunk refs in
// order and their total size.
func (s *Store) putChunks(ctx context.Context, r io.Reader) ([]ChunkRef, uint64, error) {
	// The read lock keeps s.jobs open until this call is done. Take it
	// before s.mu, never while holding it: a Close waiting for the write
	// lock blocks new readers, and the calls in progress that it waits for
	// need s.mu to finish (that order deadlocked under load).
	s.life.RLock()
	defer s.life.RUnlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, 0, ErrClosed
	}

	// Chunkers are pooled per store: each carries its store's cutter (the
	// gear table is seeded from the store key), so one must never cut
	// another store's data.
	ch, _ := s.chunkers.Get().(*cdc.Chunker)
	if ch == nil {
		ch = cdc.NewChunker(r, s.cutter)
	} else {
		ch.Reset(r)
	}
	defer func() {
		ch.Reset(nil)
		s.chunkers.Put(ch)
	}()

	call := &ingestCall{}
	var held *[]byte // the latest chunk, dispatched once we know it is not the only one
	dispatch := func(buf *[]byte) {
		ref := new(ChunkRef)
		call.refs = append(call.refs, ref)
		call.wg.Add(1)
		s.jobs <- chunkJob{ctx: ctx, buf: buf, ref: ref, call: call}
	}
	var readErr error
	for {
		c, err := ch.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		if err := ctx.Err(); err != nil {
			readErr = err
			break
		}
		buf := chunkBufs.Get().(*[]byte)
		*buf = append((*buf)[:0], c.Data...)
		if held != nil {
			dispatch(held)
		}
		held = buf
	}
	if held != nil {
		if len(call.refs) == 0 && readErr == nil {
			// A one-chunk file, the common case: no hand-off to workers.
			data := *held
			id := s.hasher.Sum(data)
			ref := &ChunkRef{ID: id, Size: uint64(len(data))}
			call.refs = append(call.refs, ref)
			if _, err := s.putBlobID(ctx, KindData, id, data); err != nil {
				call.fail(err)
			}
			chunkBufs.Put(held)
		} else {
			dispatch(held)
		}
	}
	call.wg.Wait()
	if readErr != nil {
		return nil, 0, fmt.Errorf("read file content: %w", readErr)
	}
	if call.err != nil {
		return nil, 0, call.err
	}
	chunks := make([]ChunkRef, len(call.refs))
	var size uint64
	for i, r := range call.refs {
		chunks[i] = *r
		size += r.Size
	}
	return chunks, size, nil
}

// fileContent turns a chunk list into a FileContent, moving long lists into
// chunk-list blobs.
func (s *Store) fileContent(ctx context.Context, chunks []ChunkRef, size uint64) (FileContent, error) {
	direct, lists := SplitChunks(chunks, 0)
	fc := FileContent{Size: size, Chunks: direct}
	for _, l := range lists {
		data, err := EncodeChunkList(&ChunkList{Chunks: l})
		if err != nil {
			return FileContent{}, err
		}
		id, _, err := s.PutBlob(ctx, KindChunkList, data)
		if err != nil {
			return FileContent{}, err
		}
		var n uint64
		for _, c := range l {
			n += c.Size
		}
		fc.ChunkLists = append(fc.ChunkLists, ChunkListRef{ID: id, Size: n, Count: uint32(len(l))})
	}
	return fc, nil
}
