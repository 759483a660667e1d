package chunkstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// lostVersion is the format version of lost-snapshot records.
const lostVersion = 1

// LostSnapshot records a snapshot of a workspace that is in the store but
// not on the workspace's history: its compare-and-swap lost (another
// writer moved the ref first), or it keeps a machine's changes that were
// never snapshotted when the head moved elsewhere. Nothing is dropped
// silently: such a snapshot is listed (Store.Lost, `cairn workspaces`,
// `cairn log`) with the command that forks it.
type LostSnapshot struct {
	Workspace string    `json:"workspace"`
	Snapshot  ID        `json:"snapshot"`
	Parent    ID        `json:"parent,omitzero"` // the snapshot it was taken on (zero: none)
	Head      ID        `json:"head,omitzero"`   // the workspace's head it lost to
	Host      string    `json:"host,omitempty"`
	Time      time.Time `json:"time"`
	Reason    string    `json:"reason,omitempty"`
}

// ForkCommand is the command that keeps a lost snapshot as a workspace.
func (l LostSnapshot) ForkCommand() string {
	return fmt.Sprintf("cairn fork %s %s-%s", l.Snapshot.Short(), l.Workspace, l.Snapshot.Short()[:8])
}

func lostPrefix(ws string) string     { return "lost/" + ws + "/" }
func lostKey(ws string, id ID) string { return lostPrefix(ws) + id.String() }

type lostJSON struct {
	Version int `json:"version"`
	LostSnapshot
}

// RecordLost records l (its Snapshot must be in the store). Recording the
// same snapshot again replaces the record. The time defaults to now.
func (s *Store) RecordLost(ctx context.Context, l LostSnapshot) error {
	if err := ValidWorkspaceName(l.Workspace); err != nil {
		return err
	}
	if l.Snapshot.IsZero() {
		return fmt.Errorf("%w: a lost snapshot needs its ID", ErrInvalid)
	}
	if l.Time.IsZero() {
		l.Time = time.Now()
	}
	l.Time = l.Time.UTC()
	data, err := json.Marshal(lostJSON{Version: lostVersion, LostSnapshot: l})
	if err != nil {
		return err
	}
	if _, err := s.be.Put(ctx, lostKey(l.Workspace, l.Snapshot), bytes.NewReader(append(data, '\n')), backend.Condition{}); err != nil {
		return fmt.Errorf("record lost snapshot %s of %q: %w", l.Snapshot.Short(), l.Workspace, err)
	}
	return nil
}

// Lost lists the lost snapshots of a workspace, oldest first. A record
// that does not decode is skipped (it names nothing to lose: the snapshot
// record itself is the durable part).
func (s *Store) Lost(ctx context.Context, ws string) ([]LostSnapshot, error) {
	if err := ValidWorkspaceName(ws); err != nil {
		return nil, err
	}
	var keys []string
	err := s.be.List(ctx, lostPrefix(ws), func(info backend.Info) error {
		if !strings.Contains(strings.TrimPrefix(info.Key, lostPrefix(ws)), "/") {
			keys = append(keys, info.Key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list lost snapshots of %q: %w", ws, err)
	}
	var out []LostSnapshot
	for _, k := range keys {
		data, err := backend.ReadAll(ctx, s.be, k)
		if errors.Is(err, backend.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		var l lostJSON
		if json.Unmarshal(data, &l) != nil || l.Version != lostVersion || l.Workspace != ws || l.Snapshot.IsZero() {
			continue
		}
		out = append(out, l.LostSnapshot)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}

// ForgetLost removes the record of a lost snapshot (the snapshot stays in
// the store). Forgetting one that is not recorded is not an error.
func (s *Store) ForgetLost(ctx context.Context, ws string, id ID) error {
	if err := ValidWorkspaceName(ws); err != nil {
		return err
	}
	if err := s.be.Delete(ctx, lostKey(ws, id)); err != nil && !errors.Is(err, backend.ErrNotFound) {
		return fmt.Errorf("forget lost snapshot %s of %q: %w", id.Short(), ws, err)
	}
	return nil
}
