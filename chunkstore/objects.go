package chunkstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

func snapshotKey(id ID) string { return "snapshots/" + id.String() }

// PutTree stores a directory tree blob and returns its ID.
func (s *Store) PutTree(ctx context.Context, t *Tree) (ID, error) {
	data, err := EncodeTree(t)
	if err != nil {
		return ID{}, err
	}
	id, _, err := s.PutBlob(ctx, KindTree, data)
	return id, err
}

// Tree loads and decodes a tree blob.
func (s *Store) Tree(ctx context.Context, id ID) (*Tree, error) {
	kind, data, err := s.blob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("tree: %w", err)
	}
	if kind != KindTree {
		return nil, fmt.Errorf("%w: blob %s is a %s blob, not a tree", ErrCorrupt, id.Short(), kind)
	}
	t, err := DecodeTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id.Short(), err)
	}
	return t, nil
}

// PutSnapshot makes everything stored so far durable (Flush), then writes the
// snapshot record (durably too), and returns its ID. The record never reaches the backend
// before the blobs it refers to; the root tree must be in the store.
func (s *Store) PutSnapshot(ctx context.Context, snap *Snapshot) (ID, error) {
	if !s.Has(snap.Root) {
		return ID{}, fmt.Errorf("%w: snapshot root tree %s is not in the store", ErrNotFound, snap.Root.Short())
	}
	if len(snap.Changes) > MaxInlineChanges {
		list, err := EncodeChanges(snap.Changes)
		if err != nil {
			return ID{}, err
		}
		blob, _, err := s.PutBlob(ctx, KindChanges, list)
		if err != nil {
			return ID{}, err
		}
		out := *snap
		out.Changes, out.ChangesBlob, out.ChangesCount = nil, blob, uint64(len(snap.Changes))
		snap = &out
	}
	data, err := EncodeSnapshot(snap)
	if err != nil {
		return ID{}, err
	}
	if err := s.Flush(ctx); err != nil {
		return ID{}, err
	}
	id := s.hasher.Sum(data)
	if _, err := s.be.Put(ctx, snapshotKey(id), bytes.NewReader(data), backend.Condition{}); err != nil {
		return ID{}, fmt.Errorf("write snapshot %s: %w", id.Short(), err)
	}
	if sb, ok := s.be.(syncer); ok {
		if err := sb.Sync(); err != nil {
			return ID{}, fmt.Errorf("write snapshot %s: %w", id.Short(), err)
		}
	}
	return id, nil
}

// MaxInlineChanges is the longest change list kept inside a snapshot
// record; longer ones go to a KindChanges blob.
const MaxInlineChanges = 1000

// Changes returns a snapshot's change list, from the record or its blob.
func (s *Store) Changes(ctx context.Context, snap *Snapshot) ([]Change, error) {
	if snap.ChangesBlob.IsZero() {
		return snap.Changes, nil
	}
	kind, data, err := s.blob(ctx, snap.ChangesBlob)
	if err != nil {
		return nil, fmt.Errorf("change list: %w", err)
	}
	if kind != KindChanges {
		return nil, fmt.Errorf("%w: blob %s is a %s blob, not a change list", ErrCorrupt, snap.ChangesBlob.Short(), kind)
	}
	changes, err := DecodeChanges(data)
	if err != nil {
		return nil, err
	}
	if uint64(len(changes)) != snap.ChangesCount {
		return nil, fmt.Errorf("%w: change list %s holds %d changes, the record says %d", ErrCorrupt, snap.ChangesBlob.Short(), len(changes), snap.ChangesCount)
	}
	return changes, nil
}

// Snapshot reads a snapshot record, verified against its ID.
func (s *Store) Snapshot(ctx context.Context, id ID) (*Snapshot, error) {
	js, err := s.snapshotJSON(ctx, id)
	if err != nil {
		return nil, err
	}
	snap, err := decodeSnapshotJSON(js, true)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id.Short(), err)
	}
	return snap, nil
}

// Snapshots lists the IDs of every snapshot record in the store.
func (s *Store) Snapshots(ctx context.Context) ([]ID, error) {
	var ids []ID
	err := s.be.List(ctx, "snapshots/", func(info backend.Info) error {
		if id, err := ParseID(strings.TrimPrefix(info.Key, "snapshots/")); err == nil {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return ids, nil
}
