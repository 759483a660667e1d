package chunkstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// refVersion is the format version of ref objects.
const refVersion = 1

// Ref is a workspace's head: the snapshot it points at and a generation that
// grows by one with every move. Refs move only by compare-and-swap.
type Ref struct {
	Workspace  string
	Snapshot   ID
	Generation uint64
	Updated    time.Time
	etag       string // backend version this Ref was read or written as
}

type refJSON struct {
	Version    int       `json:"version"`
	Workspace  string    `json:"workspace"`
	Snapshot   ID        `json:"snapshot"`
	Generation uint64    `json:"generation"`
	Updated    time.Time `json:"updated"`
}

func refKey(ws string) string { return "refs/" + ws }

func encodeRef(r *Ref) ([]byte, error) {
	b, err := json.Marshal(refJSON{Version: refVersion, Workspace: r.Workspace, Snapshot: r.Snapshot, Generation: r.Generation, Updated: r.Updated.UTC()})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func decodeRef(data []byte) (*Ref, error) {
	var j refJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		var probe struct {
			Version int `json:"version"`
		}
		if json.Unmarshal(data, &probe) == nil && probe.Version > refVersion {
			return nil, fmt.Errorf("%w: ref format version %d (this cairn reads %d): written by a newer cairn; upgrade cairn", ErrVersion, probe.Version, refVersion)
		}
		return nil, fmt.Errorf("%w: ref: %v", ErrCorrupt, err)
	}
	if j.Version != refVersion {
		if j.Version > refVersion {
			return nil, fmt.Errorf("%w: ref format version %d (this cairn reads %d): written by a newer cairn; upgrade cairn", ErrVersion, j.Version, refVersion)
		}
		return nil, fmt.Errorf("%w: ref format version %d", ErrCorrupt, j.Version)
	}
	if err := ValidWorkspaceName(j.Workspace); err != nil {
		return nil, fmt.Errorf("%w: ref: %v", ErrCorrupt, err)
	}
	if j.Snapshot.IsZero() || j.Generation == 0 {
		return nil, fmt.Errorf("%w: ref of %q: zero snapshot or generation", ErrCorrupt, j.Workspace)
	}
	return &Ref{Workspace: j.Workspace, Snapshot: j.Snapshot, Generation: j.Generation, Updated: j.Updated}, nil
}

// Ref reads a workspace's ref. A workspace that has none is ErrNotFound.
func (s *Store) Ref(ctx context.Context, workspace string) (Ref, error) {
	if err := ValidWorkspaceName(workspace); err != nil {
		return Ref{}, err
	}
	key := refKey(workspace)
	// Stat then Get could race with a writer; read, then confirm the ETag
	// names what was read, retrying if the ref moved in between.
	for range 5 {
		info, err := s.be.Stat(ctx, key)
		if err != nil {
			if errors.Is(err, backend.ErrNotFound) {
				return Ref{}, fmt.Errorf("%w: workspace %q has no snapshots in this store", ErrNotFound, workspace)
			}
			return Ref{}, fmt.Errorf("read ref of %q: %w", workspace, err)
		}
		data, err := backend.ReadAll(ctx, s.be, key)
		if err != nil {
			return Ref{}, fmt.Errorf("read ref of %q: %w", workspace, err)
		}
		after, err := s.be.Stat(ctx, key)
		if err != nil || after.ETag != info.ETag {
			continue
		}
		r, err := decodeRef(data)
		if err != nil {
			return Ref{}, fmt.Errorf("ref of %q: %w", workspace, err)
		}
		if r.Workspace != workspace {
			return Ref{}, fmt.Errorf("%w: ref object for %q names workspace %q", ErrCorrupt, workspace, r.Workspace)
		}
		r.etag = info.ETag
		return *r, nil
	}
	return Ref{}, fmt.Errorf("%w: ref of %q keeps changing while being read; retry", ErrConflict, workspace)
}

// SetRef moves a workspace's ref to snapshot by compare-and-swap. prev is
// the ref as last read (from Ref or SetRef); nil means the workspace must
// have no ref yet. If the ref moved since prev, or exists when prev is nil,
// SetRef fails with ErrConflict and changes nothing. The snapshot record
// must already be in the store, so a ref never points at missing data.
func (s *Store) SetRef(ctx context.Context, workspace string, snapshot ID, prev *Ref) (Ref, error) {
	if err := ValidWorkspaceName(workspace); err != nil {
		return Ref{}, err
	}
	if _, err := s.be.Stat(ctx, snapshotKey(snapshot)); err != nil {
		if errors.Is(err, backend.ErrNotFound) {
			return Ref{}, fmt.Errorf("%w: cannot point %q at snapshot %s: no such snapshot record in the store", ErrNotFound, workspace, snapshot.Short())
		}
		return Ref{}, fmt.Errorf("check snapshot %s: %w", snapshot.Short(), err)
	}
	r := Ref{Workspace: workspace, Snapshot: snapshot, Generation: 1, Updated: time.Now().UTC()}
	cond := backend.Condition{IfNoneMatch: true}
	if prev != nil {
		if prev.etag == "" || prev.Workspace != workspace {
			return Ref{}, fmt.Errorf("%w: SetRef needs the previous ref of %q as returned by Ref or SetRef", ErrInvalid, workspace)
		}
		r.Generation = prev.Generation + 1
		cond = backend.Condition{IfMatch: prev.etag}
	}
	data, err := encodeRef(&r)
	if err != nil {
		return Ref{}, err
	}
	info, err := s.be.Put(ctx, refKey(workspace), bytes.NewReader(data), cond)
	if err != nil {
		if errors.Is(err, backend.ErrConflict) || (prev != nil && errors.Is(err, backend.ErrNotFound)) {
			if prev == nil {
				return Ref{}, fmt.Errorf("%w: workspace %q already exists", ErrConflict, workspace)
			}
			return Ref{}, fmt.Errorf("%w: workspace %q moved since generation %d (another writer won); snapshot %s is kept in the store and can be forked", ErrConflict, workspace, prev.Generation, snapshot.Short())
		}
		return Ref{}, fmt.Errorf("move ref of %q: %w", workspace, err)
	}
	r.etag = info.ETag
	return r, nil
}

// Workspaces lists the workspaces that have a ref, in name order.
func (s *Store) Workspaces(ctx context.Context) ([]string, error) {
	var names []string
	err := s.be.List(ctx, "refs/", func(info backend.Info) error {
		name := strings.TrimPrefix(info.Key, "refs/")
		if ValidWorkspaceName(name) == nil {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	return names, nil
}
