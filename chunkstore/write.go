package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// The write path. A writer (PutBlob, a PutFile worker) takes an open pack
// for itself, compresses the blob straight into the pack's buffer, and hands
// the pack back; the store lock is held only to take and return packs and to
// publish entries. Full packs are sealed and queued; a few uploader
// goroutines write them to the backend. Flush waits for all of it and then
// writes the index file that lists the new packs.

const (
	// packSlack is room beyond PackSize in a pack buffer, for the last blob's
	// worst-case compressed size and the trailer.
	packSlack = 1 << 20
	// sealEntries bounds a pack's trailer (48 bytes an entry): a pack of
	// tiny blobs is sealed after this many.
	sealEntries = 1 << 16
)

// Has reports whether the store holds the blob (uploaded or pending).
func (s *Store) Has(id ID) bool {
	s.mu.Lock()
	_, ok := s.pending[id]
	s.mu.Unlock()
	return ok || s.idx.has(id)
}

// PutBlob stores data as a blob of the given kind, unless the store already
// has it, and returns its ID and whether it was new. The blob is durable once
// a later Flush returns.
func (s *Store) PutBlob(ctx context.Context, kind BlobKind, data []byte) (ID, bool, error) {
	id := s.hasher.Sum(data)
	added, err := s.putBlobID(ctx, kind, id, data)
	return id, added, err
}

// maxBlobSize keeps every blob's lengths within the u32 fields of the formats.
const maxBlobSize = 1<<32 - 1 - packHeaderSize - packSlack

// putBlobID stores data under its already computed ID.
func (s *Store) putBlobID(ctx context.Context, kind BlobKind, id ID, data []byte) (bool, error) {
	if !kind.Valid() {
		return false, fmt.Errorf("%w: blob kind %d", ErrInvalid, kind)
	}
	if len(data) > maxBlobSize {
		return false, fmt.Errorf("%w: blob of %d bytes exceeds the %d-byte limit", ErrInvalid, len(data), maxBlobSize)
	}
	if s.Has(id) {
		s.mu.Lock()
		s.stats.DedupedBlobs++
		s.mu.Unlock()
		return false, nil
	}
	p, err := s.acquirePack(ctx, compressBound(len(data)))
	if err != nil {
		return false, err
	}
	off := len(p.buf)
	comp := compNone
	if s.enc != nil && len(data) >= 64 {
		// EncodeAll appends to p.buf; acquirePack left room for the worst
		// case, so it does not reallocate. (If it did, blobs stored
		// earlier would still be intact in the old array.)
		out := s.enc.EncodeAll(data, p.buf)
		if len(out)-off < len(data) {
			p.buf, comp = out, compZstd
		}
	}
	if comp == compNone {
		p.buf = append(p.buf[:off], data...)
	}
	e := packEntry{ID: id, Kind: kind, Comp: comp, Offset: uint32(off), Stored: uint32(len(p.buf) - off), Raw: uint32(len(data))}
	added := s.releasePack(p, &e)
	if added && kind != KindData && s.rd.cache != nil {
		// Trees and lists this process writes are what it reads next (the
		// next snapshot starts from them): keep them local, so that reading
		// them needs no remote, even while it is down. File data stays in
		// the journal's staging files.
		s.rd.cache.put(id, data)
	}
	return added, nil
}

// compressBound is the most bytes a blob of n bytes can take in a pack:
// zstd stores incompressible input as raw blocks with a few bytes of framing.
func compressBound(n int) int { return n + n>>7 + 1024 }

// acquirePack returns an open pack with room for need more bytes, held by
// the caller alone until releasePack.
func (s *Store) acquirePack(ctx context.Context, need int) (*openPack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return nil, ErrClosed
		}
		if len(s.failed) > 0 {
			return nil, fmt.Errorf("earlier pack upload failed, Flush to retry: %w", s.uploadErr)
		}
		if n := len(s.idle); n > 0 {
			p := s.idle[n-1]
			s.idle = s.idle[:n-1]
			if cap(p.buf)-len(p.buf) < need+packTrailerRoom(len(p.entries)+1) {
				s.sealLocked(p) // full for this blob: start another
				continue
			}
			s.busy++
			return p, nil
		}
		// Back-pressure: no new pack while Uploads sealed packs wait.
		if len(s.queue) >= s.opts.Uploads {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			s.cond.Wait()
			continue
		}
		p := &openPack{buf: getPackBuf(max(s.cfg.PackSize, need) + packSlack)}
		p.buf = append(p.buf, packHeader()...)
		s.busy++
		return p, nil
	}
}

func packTrailerRoom(entries int) int { return entries*packEntrySize + packFooterSize }

// releasePack publishes the blob just written at the end of p (e) and gives
// p back. It reports whether the blob was added: another writer may have
// stored the same blob meanwhile, and then this copy is dropped.
func (s *Store) releasePack(p *openPack, e *packEntry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	defer s.cond.Broadcast()
	if _, dup := s.pending[e.ID]; dup || s.idx.has(e.ID) {
		p.buf = p.buf[:e.Offset]
		s.stats.DedupedBlobs++
		s.idle = append(s.idle, p)
		return false
	}
	p.entries = append(p.entries, *e)
	stored := p.buf[e.Offset:len(p.buf):len(p.buf)]
	s.pending[e.ID] = pendingBlob{kind: e.Kind, comp: e.Comp, raw: e.Raw, stored: stored}
	s.stats.NewBlobs++
	s.stats.NewRawBytes += uint64(e.Raw)
	s.stats.NewStoredBytes += uint64(e.Stored)
	if len(p.buf) >= s.cfg.PackSize || len(p.entries) >= sealEntries {
		s.sealLocked(p)
	} else {
		s.idle = append(s.idle, p)
	}
	return true
}

// packBufs recycles pack buffers across packs and stores: a fresh 16 MiB
// allocation costs a page fault for every 4 KiB first touched.
var packBufs sync.Pool

func getPackBuf(size int) []byte {
	if b, ok := packBufs.Get().(*[]byte); ok && cap(*b) >= size {
		return (*b)[:0]
	}
	return make([]byte, 0, size)
}

func putPackBuf(b []byte) {
	b = b[:0]
	packBufs.Put(&b)
}

// sealLocked closes p and queues it for upload. Called with s.mu held and p
// held by no writer.
func (s *Store) sealLocked(p *openPack) {
	if len(p.entries) == 0 {
		putPackBuf(p.buf)
		return
	}
	trailerStart := len(p.buf)
	p.buf = appendPackTrailer(p.buf, p.entries)
	// The trailer lists every blob's ID (a hash of its content), offset and
	// lengths, so its hash names the pack's content without hashing the
	// whole pack again.
	p.id = s.hasher.Sum(p.buf[trailerStart:])
	s.queue = append(s.queue, p)
	if s.uploaders < s.opts.Uploads {
		s.uploaders++
		go s.uploader()
	}
}

// uploader writes queued packs until the queue is empty.
func (s *Store) uploader() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 {
		p := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		err := s.uploadPack(p)
		s.mu.Lock()
		if err != nil {
			s.failed = append(s.failed, p)
			s.uploadErr = err
		} else {
			// The index learns of the blobs before pending forgets them,
			// so a reader always finds a blob in one or the other.
			s.idx.addPack(p.id, p.entries)
			for _, e := range p.entries {
				delete(s.pending, e.ID)
			}
			s.unindexed = append(s.unindexed, indexPack{ID: p.id, Entries: p.entries})
			// Pending reads copy out under s.mu, and none of this pack's
			// blobs is pending now: the buffer is free (or the backend's,
			// which frees it).
			if p.release != nil {
				p.release()
			} else {
				putPackBuf(p.buf)
			}
			p.buf, p.release = nil, nil
		}
		s.cond.Broadcast()
	}
	s.uploaders--
	s.cond.Broadcast()
}

func (s *Store) uploadPack(p *openPack) error {
	delay := 100 * time.Millisecond
	var err error
	op, owns := s.be.(ownedPutter)
	for attempt := 0; ; attempt++ {
		if owns {
			// The buffer is recycled once both the backend is done with it
			// and the uploader has dropped the pending blobs that alias it
			// (a pending read copies from it until then).
			buf, refs := p.buf, new(atomic.Int32)
			refs.Store(2)
			release := func() {
				if refs.Add(-1) == 0 {
					putPackBuf(buf)
				}
			}
			if _, err = op.PutOwned(s.ctx, packKey(p.id), buf, release); err == nil {
				p.release = release
			}
		} else {
			_, err = s.be.Put(s.ctx, packKey(p.id), bytes.NewReader(p.buf), backend.Condition{})
		}
		if err == nil || attempt >= s.opts.UploadRetries || s.ctx.Err() != nil || errors.Is(err, backend.ErrPermission) {
			break
		}
		select {
		case <-time.After(delay):
		case <-s.ctx.Done():
		}
		delay *= 2
	}
	if err != nil {
		return fmt.Errorf("upload pack %s (%d blobs, %d bytes): %w", p.id.Short(), len(p.entries), len(p.buf), err)
	}
	return nil
}

// Flush makes every blob stored before the call durable: it waits for
// writers holding packs, seals the open packs, waits for (and retries) pack
// uploads, then writes an index file for the packs uploaded since the last
// Flush. Packs always reach the backend before the index file that lists
// them.
func (s *Store) Flush(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return s.flush(ctx)
}

func (s *Store) flush(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	if len(s.failed) > 0 { // retry what failed before
		s.queue = append(s.failed, s.queue...)
		s.failed = nil
		s.uploadErr = nil
		for s.uploaders < s.opts.Uploads && s.uploaders < len(s.queue) {
			s.uploaders++
			go s.uploader()
		}
	}
	for s.busy > 0 {
		s.cond.Wait()
	}
	for _, p := range s.idle {
		s.sealLocked(p)
	}
	s.idle = nil
	for len(s.queue) > 0 || s.uploaders > 0 {
		s.cond.Wait()
	}
	if len(s.failed) > 0 {
		err := s.uploadErr
		s.mu.Unlock()
		return fmt.Errorf("flush: %w", err)
	}
	packs := s.unindexed
	s.unindexed = nil
	s.mu.Unlock()

	if len(packs) > 0 {
		if err := s.writeIndex(ctx, &indexFile{Packs: packs}); err != nil {
			s.mu.Lock()
			s.unindexed = append(packs, s.unindexed...)
			s.mu.Unlock()
			return fmt.Errorf("flush: %w", err)
		}
	}
	if sb, ok := s.be.(syncer); ok {
		if err := sb.Sync(); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
	}
	return nil
}

// ownedPutter is a backend that can take a pack's buffer instead of
// copying it (the outbox, which queues packs in memory): release is called
// once the backend is done with it; on an error it is not taken.
type ownedPutter interface {
	PutOwned(ctx context.Context, key string, data []byte, release func()) (backend.Info, error)
}

// syncer is a backend whose writes become durable only when synced: the
// outbox, which writes objects to local disk without fsync and uploads
// most of them before anything needs them durable.
type syncer interface {
	Sync() error
}

func (s *Store) writeIndex(ctx context.Context, f *indexFile) error {
	data := encodeIndex(f)
	id := s.hasher.Sum(data)
	if _, err := s.be.Put(ctx, indexKey(id), bytes.NewReader(data), backend.Condition{}); err != nil {
		return fmt.Errorf("write index %s: %w", id.Short(), err)
	}
	if s.cache != nil {
		s.cache.store(id, data) // best effort: a missing cache entry is fetched again
	}
	s.refreshMu.Lock()
	if s.knownIndex == nil {
		s.knownIndex = make(map[ID]bool)
	}
	s.knownIndex[id] = true
	s.refreshMu.Unlock()
	return nil
}
