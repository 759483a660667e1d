package chunkstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
)

// EntryChange classifies how an entry changed between two trees: content
// (modified) or only metadata. Times alone do not count, nor a directory's
// subtree (what changed inside it is reported for its own entries).
func EntryChange(a, b *Entry) (ChangeOp, bool) {
	if a.Type != b.Type || a.Ino != b.Ino {
		return ChangeModified, true
	}
	if b.Type == TypeRegular && (a.Size != b.Size || !bytes.Equal(a.Inline, b.Inline) ||
		!slices.Equal(a.Chunks, b.Chunks) || !slices.Equal(a.ChunkLists, b.ChunkLists)) {
		return ChangeModified, true
	}
	if b.Type == TypeSymlink && a.Target != b.Target {
		return ChangeModified, true
	}
	if a.Mode != b.Mode || a.UID != b.UID || a.GID != b.GID || a.Rdev != b.Rdev || a.Nlink != b.Nlink || !slices.EqualFunc(a.Xattrs, b.Xattrs, func(x, y Xattr) bool {
		return x.Name == y.Name && bytes.Equal(x.Value, y.Value)
	}) {
		return ChangeMetadataOnly, true
	}
	return 0, false
}

// DiffEntries calls emit for every entry of two versions of one directory
// (prev, cur: sorted trees; nil is empty) that was added, removed or
// changed, with the entry as it is after the change (before it, for
// removed). Directories that only differ inside are not reported.
func DiffEntries(prev, cur *Tree, emit func(op ChangeOp, before, after *Entry)) {
	var pe, ce []Entry
	if prev != nil {
		pe = prev.Entries
	}
	if cur != nil {
		ce = cur.Entries
	}
	i, k := 0, 0
	for i < len(pe) || k < len(ce) {
		switch {
		case k == len(ce) || (i < len(pe) && pe[i].Name < ce[k].Name):
			emit(ChangeRemoved, &pe[i], nil)
			i++
		case i == len(pe) || ce[k].Name < pe[i].Name:
			emit(ChangeAdded, nil, &ce[k])
			k++
		default:
			if op, ok := EntryChange(&pe[i], &ce[k]); ok {
				emit(op, &pe[i], &ce[k])
			} else if pe[i].Type == TypeDir && pe[i].Subtree != ce[k].Subtree {
				emit(0, &pe[i], &ce[k]) // only the inside changed
			}
			i++
			k++
		}
	}
}

// Diff lists the paths that differ between two directory trees (a before,
// b after; a zero ID is an empty directory), in path order. It is
// O(changed): subtrees with equal IDs are skipped without being read. A
// directory that was added or removed is listed with everything in it.
func (s *Store) Diff(ctx context.Context, a, b ID) ([]Change, error) {
	var out []Change
	err := s.diffTrees(ctx, a, b, "", &out)
	return out, err
}

func (s *Store) diffTrees(ctx context.Context, a, b ID, path string, out *[]Change) error {
	if a == b {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var ta, tb *Tree
	var err error
	if !a.IsZero() {
		if ta, err = s.Tree(ctx, a); err != nil {
			return err
		}
	}
	if !b.IsZero() {
		if tb, err = s.Tree(ctx, b); err != nil {
			return err
		}
	}
	var walkErr error
	DiffEntries(ta, tb, func(op ChangeOp, before, after *Entry) {
		if walkErr != nil {
			return
		}
		e := after
		if e == nil {
			e = before
		}
		p := path + "/" + e.Name
		if p[0] == '/' {
			p = p[1:]
		}
		if op != 0 {
			*out = append(*out, Change{Path: p, Op: op, Size: e.Size})
		}
		var sa, sb ID
		if before != nil && before.Type == TypeDir {
			sa = before.Subtree
		}
		if after != nil && after.Type == TypeDir {
			sb = after.Subtree
		}
		if !sa.IsZero() || !sb.IsZero() {
			walkErr = s.diffTrees(ctx, sa, sb, p, out)
		}
	})
	return walkErr
}

// Content returns a regular file entry's content for OpenFile (an inline
// file's bytes are in Inline, not here).
func (e *Entry) Content() FileContent {
	return FileContent{Size: e.Size, Chunks: e.Chunks, ChunkLists: e.ChunkLists}
}

// Lookup finds the entry at path (slash-separated, relative; "" or "/" is
// the root, returned as a directory entry with Subtree root) in the tree
// root. A missing path is ErrNotFound naming the first missing component.
func (s *Store) Lookup(ctx context.Context, root ID, path string) (*Entry, error) {
	cur := &Entry{Type: TypeDir, Subtree: root, Ino: 1}
	walked := ""
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		if name == "" || name == "." {
			continue
		}
		if cur.Type != TypeDir {
			return nil, fmt.Errorf("%w: %s is not a directory", ErrNotFound, walked)
		}
		t, err := s.Tree(ctx, cur.Subtree)
		if err != nil {
			return nil, err
		}
		e, ok := t.Find(name)
		if !ok {
			return nil, fmt.Errorf("%w: no %s/%s", ErrNotFound, walked, name)
		}
		cur, walked = e, walked+"/"+name
	}
	return cur, nil
}
