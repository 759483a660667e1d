package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// quarantinePrefix is where RepairIndex moves corrupt index files once
// every pack is indexed without them: kept for inspection, never read.
const quarantinePrefix = "quarantine/"

// RepairOptions configure RepairIndex. The zero value repairs.
type RepairOptions struct {
	// DryRun finds what is wrong and reports what would be done, changing
	// nothing.
	DryRun bool
}

// RepairReport says what RepairIndex found and did.
type RepairReport struct {
	IndexFiles int  // index files listed
	Corrupt    []ID // index files that failed verification
	Packs      int  // packs listed
	// Unindexed are the packs no valid index file lists, re-indexed from
	// their trailers (unless DryRun); Blobs counts their blobs.
	Unindexed []ID
	Blobs     int
	// BadPacks are packs whose trailer could not be verified: they are
	// left alone (never deleted), and their blobs stay unreadable.
	BadPacks []PackProblem
	// Written is the index file written for Unindexed (zero: none).
	Written ID
	// Quarantined are the corrupt index files copied under quarantine/
	// and removed, after Written was durable (or overwritten by Written,
	// when that is the file's intended content). A corrupt file is moved
	// only when every pack of the store is listed by a valid index file
	// without it.
	Quarantined []ID
}

// PackProblem is a pack RepairIndex could not re-index.
type PackProblem struct {
	ID  ID
	Err error
}

// RepairIndex finds index files that are corrupt and packs that no valid
// index file lists (their index file corrupt, or never written), re-reads
// those packs' trailers (each checked against the pack's ID), writes one
// new index file for them, and then moves the corrupt index files to
// quarantine/. It only adds index files and never touches a pack, so it is
// safe while the store is in use elsewhere (a pack whose index file its
// writer has not written yet gets listed twice, which is harmless), and
// running it again changes nothing. This store reads the repaired blobs at
// once; other processes find them when they look a blob up.
func (s *Store) RepairIndex(ctx context.Context, opts RepairOptions) (*RepairReport, error) {
	rep := &RepairReport{}
	covered := map[ID]bool{}
	var corruptData = map[ID][]byte{}
	var ids []ID
	err := s.be.List(ctx, "index/", func(info backend.Info) error {
		if id, err := ParseID(strings.TrimPrefix(info.Key, "index/")); err == nil {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list index files: %w", err)
	}
	for _, id := range ids {
		// The object in the backend, not a cached copy: that is what other
		// machines read.
		data, err := backend.ReadAll(ctx, s.be, indexKey(id))
		switch {
		case errors.Is(err, backend.ErrNotFound):
			continue // removed meanwhile (another repair)
		case err != nil:
			return nil, fmt.Errorf("read index file %s: %w", id.Short(), err)
		}
		rep.IndexFiles++
		f, err := s.verifyIndex(id, data)
		if err != nil {
			rep.Corrupt = append(rep.Corrupt, id)
			corruptData[id] = data
			continue
		}
		for _, p := range f.Packs {
			covered[p.ID] = true
		}
	}

	type pack struct {
		id   ID
		size int64
	}
	var packs []pack
	err = s.be.List(ctx, "packs/", func(info backend.Info) error {
		name := info.Key[strings.LastIndexByte(info.Key, '/')+1:]
		if id, err := ParseID(name); err == nil && info.Key == packKey(id) {
			packs = append(packs, pack{id, info.Size})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list packs: %w", err)
	}
	rep.Packs = len(packs)
	var fresh []indexPack
	for _, p := range packs {
		if covered[p.id] {
			continue
		}
		es, err := s.readTrailer(ctx, p.id, p.size)
		switch {
		case errors.Is(err, ErrCorrupt):
			rep.BadPacks = append(rep.BadPacks, PackProblem{p.id, err})
			continue
		case err != nil:
			return nil, err
		}
		rep.Unindexed = append(rep.Unindexed, p.id)
		rep.Blobs += len(es)
		fresh = append(fresh, indexPack{ID: p.id, Entries: es})
	}
	if opts.DryRun {
		return rep, nil
	}

	if len(fresh) > 0 {
		f := &indexFile{Packs: fresh}
		data := encodeIndex(f)
		id := s.hasher.Sum(data)
		if err := s.writeIndex(ctx, f); err != nil {
			return rep, err
		}
		if sb, ok := s.be.(syncer); ok {
			if err := sb.Sync(); err != nil {
				return rep, fmt.Errorf("write index %s: %w", id.Short(), err)
			}
		}
		rep.Written = id
		for _, p := range fresh {
			s.idx.addPack(p.ID, p.Entries)
		}
	}
	if len(rep.BadPacks) > 0 {
		return rep, nil // a corrupt index file may be all that lists a bad pack's blobs
	}
	for _, id := range rep.Corrupt {
		q := quarantinePrefix + indexKey(id)
		if _, err := s.be.Put(ctx, q, bytes.NewReader(corruptData[id]), backend.Condition{}); err != nil {
			return rep, fmt.Errorf("quarantine index file %s: %w", id.Short(), err)
		}
		// The new index file may be the corrupt one's intended bytes
		// (the same packs in the same order): its write then replaced
		// the damaged object, which stays.
		if id != rep.Written {
			if err := s.be.Delete(ctx, indexKey(id)); err != nil && !errors.Is(err, backend.ErrNotFound) {
				return rep, fmt.Errorf("remove corrupt index file %s (a copy is at %s): %w", id.Short(), q, err)
			}
		}
		rep.Quarantined = append(rep.Quarantined, id)
		s.refreshMu.Lock()
		delete(s.badIndex, id)
		s.refreshMu.Unlock()
	}
	return rep, nil
}

// verifyIndex checks an index file's bytes against its name and decodes
// them.
func (s *Store) verifyIndex(id ID, data []byte) (*indexFile, error) {
	if got := s.hasher.Sum(data); got != id {
		return nil, fmt.Errorf("%w: index file %s does not match its name (hashes to %s)", ErrCorrupt, id.Short(), got.Short())
	}
	f, err := decodeIndex(data)
	if err != nil {
		return nil, fmt.Errorf("index file %s: %w", id.Short(), err)
	}
	return f, nil
}

// readTrailer reads the trailer of a pack of size bytes, checks it against
// the pack's ID and returns its entries. A pack that is damaged is
// ErrCorrupt; a backend failure is returned as it is.
func (s *Store) readTrailer(ctx context.Context, id ID, size int64) ([]packEntry, error) {
	if size < packHeaderSize+packFooterSize {
		return nil, fmt.Errorf("%w: pack %s is %d bytes, too short for a pack", ErrCorrupt, id, size)
	}
	footer, err := s.readAt(ctx, id, size-packFooterSize, packFooterSize)
	if err != nil {
		return nil, err
	}
	n, err := packTrailerLen(footer, size)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", id, err)
	}
	tail, err := s.readAt(ctx, id, size-packFooterSize-int64(n), int64(n)+packFooterSize)
	if err != nil {
		return nil, err
	}
	if s.hasher.Sum(tail) != id {
		return nil, fmt.Errorf("%w: the trailer of pack %s does not match the pack's ID", ErrCorrupt, id)
	}
	es, err := decodePackTrailer(tail, size)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", id, err)
	}
	return es, nil
}

// readAt reads n bytes of a pack at off; a pack shorter than that is
// ErrCorrupt.
func (s *Store) readAt(ctx context.Context, id ID, off, n int64) ([]byte, error) {
	rc, err := s.be.Get(ctx, packKey(id), off, n)
	if err != nil {
		if errors.Is(err, backend.ErrRange) {
			return nil, fmt.Errorf("%w: pack %s is truncated", ErrCorrupt, id)
		}
		return nil, fmt.Errorf("read pack %s: %w", id, err)
	}
	defer rc.Close()
	buf := make([]byte, n)
	if _, err := io.ReadFull(rc, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: pack %s is truncated", ErrCorrupt, id)
		}
		return nil, fmt.Errorf("read pack %s: %w", id, err)
	}
	return buf, nil
}
