package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// Blob returns the plaintext of a blob, verified against its ID.
func (s *Store) Blob(ctx context.Context, id ID) ([]byte, error) {
	_, data, err := s.blob(ctx, id)
	return data, err
}

// blob returns a blob with its kind. From a remote store it also fetches the
// blob's neighbours in its pack (see fetch.go).
func (s *Store) blob(ctx context.Context, id ID) (BlobKind, []byte, error) {
	return s.readBlob(ctx, id, true)
}

// readBlob returns a blob with its kind: pending, from a local backend, or
// through the remote read path (around: with its pack neighbours).
func (s *Store) readBlob(ctx context.Context, id ID, around bool) (BlobKind, []byte, error) {
	// Pending first: a blob moves from pending to the index, never back, and
	// the index learns of it before pending forgets it.
	s.mu.Lock()
	if pb, ok := s.pending[id]; ok {
		stored := bytes.Clone(pb.stored) // the pack buffer is recycled after upload
		s.mu.Unlock()
		data, err := s.decode(pb.comp, stored, pb.raw)
		if err != nil {
			return 0, nil, fmt.Errorf("pending blob %s: %w", id, err)
		}
		return pb.kind, data, nil
	}
	s.mu.Unlock()

	packID, loc, ok := s.idx.lookup(id)
	if !ok {
		if err := s.refreshIndex(ctx); err != nil {
			return 0, nil, fmt.Errorf("blob %s is not in the store's index, and reloading the index failed: %w", id, err)
		}
		if packID, loc, ok = s.idx.lookup(id); !ok {
			return 0, nil, s.missingBlob(id, 1)
		}
	}
	if s.rd.remote {
		return s.remoteBlob(ctx, id, packID, loc, around)
	}
	data, errs := s.fetchPackRange(ctx, packID, []rangeBlob{{id, loc}})
	if errs[0] != nil {
		return 0, nil, errs[0]
	}
	return loc.kind, data[0], nil
}

// fetchPackRange reads blobs of one pack, in offset order, with one GET
// from the first one's start to the last one's end, and decodes and verifies
// each: data[i] or errs[i]. Errors name the blob and the pack.
func (s *Store) fetchPackRange(ctx context.Context, packID ID, blobs []rangeBlob) (data [][]byte, errs []error) {
	data, errs = make([][]byte, len(blobs)), make([]error, len(blobs))
	first, last := blobs[0].loc, blobs[len(blobs)-1].loc
	start := uint64(first.offset)
	buf, short, err := s.readPack(ctx, packID, start, uint64(last.offset)+uint64(last.stored)-start)
	for i, b := range blobs {
		lo := uint64(b.loc.offset) - start
		hi := lo + uint64(b.loc.stored)
		switch {
		case err != nil:
			if errors.Is(err, backend.ErrNotFound) || errors.Is(err, backend.ErrRange) {
				errs[i] = fmt.Errorf("%w: blob %s: pack %s is missing or truncated in the store (%v); the store is damaged", ErrCorrupt, b.id, packID, err)
			} else {
				errs[i] = fmt.Errorf("read blob %s from pack %s: %w", b.id, packID, err)
			}
			continue
		case short && hi > uint64(len(buf)):
			errs[i] = fmt.Errorf("%w: blob %s: pack %s is truncated", ErrCorrupt, b.id, packID)
			continue
		}
		plain, err := s.decode(b.loc.comp, buf[lo:hi], b.loc.raw)
		if err != nil {
			errs[i] = fmt.Errorf("blob %s in pack %s: %w", b.id, packID, err)
			continue
		}
		if got := s.hasher.Sum(plain); got != b.id {
			errs[i] = fmt.Errorf("%w: blob %s in pack %s does not match its ID (hashes to %s): the pack is corrupt, or the store's hash key was changed", ErrCorrupt, b.id, packID, got.Short())
			continue
		}
		data[i] = plain
	}
	return data, errs
}

// readPack GETs n bytes of a pack from off. short reports a pack that ended
// before them: buf then holds what there was.
func (s *Store) readPack(ctx context.Context, packID ID, off, n uint64) (buf []byte, short bool, err error) {
	s.rd.gets.Add(1)
	rc, err := s.be.Get(ctx, packKey(packID), int64(off), int64(n))
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	buf = make([]byte, n)
	got, err := io.ReadFull(rc, buf)
	s.rd.fetched.Add(uint64(got))
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return buf[:got], true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return buf, false, nil
}

func (s *Store) decode(comp uint8, stored []byte, raw uint32) ([]byte, error) {
	switch comp {
	case compNone:
		if uint32(len(stored)) != raw {
			return nil, fmt.Errorf("%w: stored length %d, expected %d", ErrCorrupt, len(stored), raw)
		}
		return bytes.Clone(stored), nil
	case compZstd:
		out, err := s.dec.DecodeAll(stored, make([]byte, 0, raw))
		if err != nil {
			return nil, fmt.Errorf("%w: decompress: %v", ErrCorrupt, err)
		}
		if uint32(len(out)) != raw {
			return nil, fmt.Errorf("%w: decompressed to %d bytes, expected %d", ErrCorrupt, len(out), raw)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown compression %d", ErrCorrupt, comp)
}
