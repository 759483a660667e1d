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

// blob returns a blob with its kind.
func (s *Store) blob(ctx context.Context, id ID) (BlobKind, []byte, error) {
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
			return 0, nil, fmt.Errorf("%w: blob %s is not in the store's index", ErrNotFound, id)
		}
	}
	rc, err := s.be.Get(ctx, packKey(packID), int64(loc.offset), int64(loc.stored))
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) || errors.Is(err, backend.ErrRange) {
			return 0, nil, fmt.Errorf("%w: blob %s: pack %s is missing or truncated in the store (%v); the store is damaged", ErrCorrupt, id, packID, err)
		}
		return 0, nil, fmt.Errorf("read blob %s from pack %s: %w", id, packID, err)
	}
	stored := make([]byte, loc.stored)
	_, err = io.ReadFull(rc, stored)
	rc.Close()
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, nil, fmt.Errorf("%w: blob %s: pack %s is truncated", ErrCorrupt, id, packID)
		}
		return 0, nil, fmt.Errorf("read blob %s from pack %s: %w", id, packID, err)
	}
	data, err := s.decode(loc.comp, stored, loc.raw)
	if err != nil {
		return 0, nil, fmt.Errorf("blob %s in pack %s: %w", id, packID, err)
	}
	if got := s.hasher.Sum(data); got != id {
		return 0, nil, fmt.Errorf("%w: blob %s in pack %s does not match its ID (hashes to %s): the pack is corrupt, or the store's hash key was changed", ErrCorrupt, id, packID, got.Short())
	}
	return loc.kind, data, nil
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
