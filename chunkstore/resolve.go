package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Resolve turns a snapshot reference into a snapshot ID. A reference is
// WORKSPACE (its head), WORKSPACE@N (its snapshot with sequence number N,
// found by walking back from the head), or a unique prefix of a snapshot ID
// (at least 4 hex digits). A workspace name wins over an ID prefix that
// looks the same. Errors say what exists: the candidates of an ambiguous
// prefix, the workspaces when none matches.
func (s *Store) Resolve(ctx context.Context, ref string) (ID, error) {
	if ref == "" {
		return ID{}, fmt.Errorf("%w: empty snapshot reference", ErrInvalid)
	}
	name, seqStr, hasSeq := strings.Cut(ref, "@")
	if ValidWorkspaceName(name) == nil {
		head, err := s.Ref(ctx, name)
		switch {
		case err == nil && !hasSeq:
			return head.Snapshot, nil
		case err == nil:
			seq, perr := strconv.ParseUint(seqStr, 10, 64)
			if perr != nil {
				return ID{}, fmt.Errorf("%w: %q: the part after @ must be a sequence number", ErrInvalid, ref)
			}
			return s.walkToSeq(ctx, name, head.Snapshot, seq)
		case !errors.Is(err, ErrNotFound):
			return ID{}, err
		case hasSeq:
			return ID{}, s.noSuchWorkspace(ctx, name)
		}
	}
	if len(ref) < 4 || strings.Trim(strings.ToLower(ref), "0123456789abcdef") != "" {
		return ID{}, s.noSuchWorkspace(ctx, ref)
	}
	ids, err := s.Snapshots(ctx)
	if err != nil {
		return ID{}, err
	}
	prefix := strings.ToLower(ref)
	var match []ID
	for _, id := range ids {
		if strings.HasPrefix(id.String(), prefix) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return ID{}, fmt.Errorf("%w: no workspace and no snapshot ID starts with %q", ErrNotFound, ref)
	}
	sort.Slice(match, func(i, j int) bool { return match[i].String() < match[j].String() })
	var names []string
	for _, id := range match[:min(len(match), 10)] {
		names = append(names, id.Short())
	}
	return ID{}, fmt.Errorf("%w: snapshot ID prefix %q is ambiguous: %d snapshots match (%s); give more digits", ErrInvalid, ref, len(match), strings.Join(names, ", "))
}

func (s *Store) walkToSeq(ctx context.Context, ws string, id ID, seq uint64) (ID, error) {
	var found ID
	errFound := errors.New("found")
	err := s.History(ctx, id, 0, func(id ID, snap *Snapshot) error {
		if snap.Seq == seq {
			found = id
			return errFound
		}
		if snap.Seq < seq {
			return errFound
		}
		return nil
	})
	if err != nil && err != errFound {
		return ID{}, err
	}
	if found.IsZero() {
		return ID{}, fmt.Errorf("%w: workspace %q has no snapshot @%d in its history", ErrNotFound, ws, seq)
	}
	return found, nil
}

func (s *Store) noSuchWorkspace(ctx context.Context, name string) error {
	list, err := s.Workspaces(ctx)
	if err != nil || len(list) == 0 {
		return fmt.Errorf("%w: no workspace or snapshot %q (the store has no workspaces yet)", ErrNotFound, name)
	}
	sort.Strings(list)
	if len(list) > 10 {
		list = append(list[:10], "...")
	}
	return fmt.Errorf("%w: no workspace or snapshot %q; workspaces: %s", ErrNotFound, name, strings.Join(list, ", "))
}
