package journal

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/cairnfs/cairn/journal/internal/metalog"

	"github.com/cairnfs/cairn/chunkstore"
)

// RestoredPath is one path Restore reverted.
type RestoredPath struct {
	Path    string `json:"path"`    // slash-separated, relative to the root
	Removed bool   `json:"removed"` // not in the snapshot: removed from the live state
	Inodes  uint64 `json:"inodes"`  // entries written from the snapshot
}

// RestoreResult says what Restore did.
type RestoreResult struct {
	// Before is the snapshot of the state before the restore: the head if
	// nothing had changed since it, else a new snapshot taken first. Every
	// restore can be undone from it.
	Before chunkstore.ID
	Paths  []RestoredPath
}

// Restore makes each path of the live state what it is in snapshot from:
// a file or symlink gets its content and metadata back, a directory its
// whole subtree (what the live state has there and the snapshot has not
// is removed), and a path the snapshot does not have is removed. Missing
// parent directories are created as the snapshot has them.
//
// The live state is snapshotted first (unless nothing changed since the
// head), and that snapshot is Result.Before. The restored paths are live
// changes: the next snapshot records them. Restored entries get fresh
// inode numbers (hard links among them stay links); their times, owners,
// modes and xattrs are the snapshot's. The work is O(restored entries), no
// data is copied: files share the snapshot's chunks until written.
//
// Files open under a replaced path keep their old content, as after a
// rename over them. Restore is not atomic across a crash (a big subtree
// takes several transactions); Before holds the state to go back to.
func (j *Journal) Restore(ctx context.Context, from chunkstore.ID, paths []string) (RestoreResult, error) {
	var res RestoreResult
	var inval []restoredName
	j.snapMu.Lock()
	defer j.snapMu.Unlock()
	err := func() error {
		if err := j.lockAll(); err != nil {
			return err
		}
		defer j.mu.Unlock()
		var err error
		res, inval, err = j.restoreLocked(ctx, from, paths)
		return err
	}()
	// The kernel's caches are dropped after the lock is released: a
	// notification can wait for a request that waits for the lock.
	if inv := j.cfg.Invalidator; inv != nil {
		for _, n := range inval {
			inv.InvalidateEntry(n.parent, n.name)
			inv.InvalidateInode(n.parent)
		}
	}
	return res, err
}

type restoredName struct {
	parent Ino
	name   string
}

// restorePlan is one path to restore, checked before anything changes.
type restorePlan struct {
	path  string
	entry *chunkstore.Entry // nil: not in the snapshot
}

func (j *Journal) restoreLocked(ctx context.Context, from chunkstore.ID, paths []string) (RestoreResult, []restoredName, error) {
	var res RestoreResult
	defer j.prog.done()
	snap, err := j.store.Snapshot(ctx, from)
	if err != nil {
		return res, nil, fmt.Errorf("restore from %s: %w", from.Short(), err)
	}
	plans, err := j.planRestore(ctx, from, snap, paths)
	if err != nil {
		return res, nil, err
	}
	if len(j.cache.dirty) == 0 && !j.m.Base.IsZero() {
		res.Before = j.m.Base
	} else {
		res.Before, _, err = j.snapshotLocked(ctx, SnapshotOptions{
			Message: fmt.Sprintf("state before restore from %s", from.Short()),
			Labels:  map[string]string{"cairn.restore": "before"},
		}, false)
		if err != nil {
			return res, nil, fmt.Errorf("restore: snapshot the current state first: %w", err)
		}
	}
	j.prog.start("restore") // after the snapshot of the state before, which counts its own
	var inval []restoredName
	for _, p := range plans {
		rp, name, err := j.restorePath(ctx, snap.Root, p)
		if name.parent != 0 {
			inval = append(inval, name) // changed, if only in part
		}
		if err != nil {
			return res, inval, fmt.Errorf("restore %s from %s: %w (the state before the restore is snapshot %s)", p.path, from.Short(), err, res.Before.Short())
		}
		res.Paths = append(res.Paths, rp)
	}
	return res, inval, nil
}

// planRestore cleans the paths, drops those inside another one, looks each
// up in the snapshot and checks that the live state can take it, so that a
// bad path fails the restore before anything changes.
func (j *Journal) planRestore(ctx context.Context, from chunkstore.ID, snap *chunkstore.Snapshot, paths []string) ([]restorePlan, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("restore: no paths given: %w", ErrInvalid)
	}
	clean := make([]string, 0, len(paths))
	for _, p := range paths {
		c := strings.TrimPrefix(path.Clean("/"+p), "/")
		if c == "" {
			return nil, fmt.Errorf("restore of the whole workspace: roll it back instead: %w", ErrInvalid)
		}
		clean = append(clean, c)
	}
	sort.Strings(clean)
	var plans []restorePlan
	for _, c := range clean {
		if n := len(plans); n > 0 && (plans[n-1].path == c || strings.HasPrefix(c, plans[n-1].path+"/")) {
			continue // inside a path restored already
		}
		p := restorePlan{path: c}
		e, err := j.store.Lookup(ctx, snap.Root, c)
		switch {
		case err == nil:
			p.entry = e
		case !errors.Is(err, chunkstore.ErrNotFound):
			return nil, fmt.Errorf("restore %s: %w", c, err)
		}
		_, _, live, err := j.walk(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("restore %s: %w", c, err)
		}
		if p.entry == nil && !live {
			return nil, fmt.Errorf("restore %s: in neither snapshot %s nor the live workspace: %w", c, from.Short(), ErrNotFound)
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// walk resolves the parent directory of a live path and reports whether
// the path exists. A missing ancestor gives parent 0; an ancestor that is
// not a directory is ErrNotDir.
func (j *Journal) walk(ctx context.Context, p string) (parent Ino, name string, exists bool, err error) {
	names := strings.Split(p, "/")
	dir := RootIno
	for i, n := range names {
		child, t, ok, err := j.lookupLoaded(ctx, dir, n)
		if err != nil {
			return 0, "", false, err
		}
		switch {
		case i == len(names)-1:
			return dir, n, ok, nil
		case !ok:
			return 0, "", false, nil
		case t != TypeDir:
			return 0, "", false, fmt.Errorf("live %s is not a directory (restore it instead): %w", strings.Join(names[:i+1], "/"), ErrNotDir)
		}
		dir = child
	}
	return 0, "", false, nil
}

// lookupLoaded looks name up in directory dir, loading dir first.
func (j *Journal) lookupLoaded(ctx context.Context, dir Ino, name string) (child Ino, t Type, ok bool, err error) {
	if err := j.ensureDir(ctx, dir); err != nil {
		return 0, 0, false, err
	}
	err = j.db.View(func(txn *metalog.Txn) error {
		var err error
		child, t, ok, err = j.child(txn, dir, name)
		return err
	})
	return child, t, ok, err
}

// restorePath applies one plan.
func (j *Journal) restorePath(ctx context.Context, root chunkstore.ID, p restorePlan) (RestoredPath, restoredName, error) {
	out := RestoredPath{Path: p.path, Removed: p.entry == nil}
	parent, name, exists, err := j.walk(ctx, p.path)
	if err != nil {
		return out, restoredName{}, err
	}
	now := j.cfg.Clock()
	made := parent == 0
	rn := restoredName{parent, name}
	if made { // planRestore saw to it that the snapshot has p
		// The kernel knows nothing of the directories made here, only of
		// the existing one that got the first of them: that is the name
		// whose cached lookup (a negative one, likely) and listing go.
		if parent, rn, err = j.makeAncestors(ctx, root, p.path); err != nil {
			return out, rn, err
		}
		name = path.Base(p.path)
	}
	parentTime := now
	if made {
		parentTime = 0 // a directory just made keeps the snapshot's times
	}
	if exists {
		var dropped []*inode
		err := j.removeAll(ctx, parent, name, now, &dropped)
		j.forget(dropped)
		if err != nil {
			return out, rn, err
		}
	}
	if p.entry != nil {
		if out.Inodes, err = j.graft(ctx, parent, name, p.entry, parentTime); err != nil {
			return out, rn, err
		}
	}
	return out, rn, nil
}

// makeAncestors creates the missing directories above p as empty
// directories with the snapshot's metadata, and returns p's parent and the
// first directory made, named in the existing directory that got it.
func (j *Journal) makeAncestors(ctx context.Context, root chunkstore.ID, p string) (Ino, restoredName, error) {
	names := strings.Split(p, "/")
	dir := RootIno
	var top restoredName
	now := j.cfg.Clock() // for the existing directory that gets a new entry
	for i, n := range names[:len(names)-1] {
		child, _, ok, err := j.lookupLoaded(ctx, dir, n)
		if err != nil {
			return 0, top, err
		}
		if !ok {
			if top.parent == 0 {
				top = restoredName{dir, n}
			}
			e, err := j.store.Lookup(ctx, root, strings.Join(names[:i+1], "/"))
			if err != nil {
				return 0, top, err
			}
			shallow := *e
			shallow.Subtree = chunkstore.ID{} // the directory alone, not its entries
			if err := j.checkInodeQuota(1); err != nil {
				return 0, top, err
			}
			err = j.update(func(txn *metalog.Txn) error {
				var err error
				if child, err = j.graftEntry(txn, dir, &shallow, nil); err != nil {
					return err
				}
				return j.touchParent(txn, dir, true, now)
			})
			if err != nil {
				return 0, top, err
			}
			now = 0 // directories made here keep the snapshot's times
		}
		dir = child
	}
	return dir, top, nil
}

// touchParent updates a directory whose entries changed: its times (unless
// now is 0), and its link count when a subdirectory was added.
func (j *Journal) touchParent(txn *metalog.Txn, dir Ino, subdirAdded bool, now int64) error {
	p, err := j.getInode(txn, dir)
	if err != nil {
		return err
	}
	if subdirAdded {
		p.Nlink++
	}
	if now != 0 {
		p.Mtime, p.Ctime = now, now
	}
	return j.putInode(txn, p)
}

// removeAll removes parent/name and everything under it, like rm -rf:
// each directory's entries in batches, then the directory.
func (j *Journal) removeAll(ctx context.Context, parent Ino, name string, now int64, dropped *[]*inode) error {
	ino, t, ok, err := j.lookupLoaded(ctx, parent, name)
	if err != nil || !ok {
		return err
	}
	if t == TypeDir {
		if err := j.ensureDir(ctx, ino); err != nil {
			return err
		}
		for {
			ents, err := j.dentries(ino, loadBatch)
			if err != nil {
				return err
			}
			if len(ents) == 0 {
				break
			}
			var files []DirEntry
			for _, e := range ents {
				if e.Type == TypeDir {
					if err := j.removeAll(ctx, ino, e.Name, now, dropped); err != nil {
						return err
					}
				} else {
					files = append(files, e)
				}
			}
			if err := j.dropNames(ino, files, now, dropped); err != nil {
				return err
			}
		}
		delete(j.loadedDirs, ino)
	}
	return j.update(func(txn *metalog.Txn) error {
		return j.removeEntry(txn, parent, name, ino, t == TypeDir, now, dropped)
	})
}

// dropNames removes the names files from directory dir, as many per
// transaction as fit: a name of a hardlinked file rewrites its record,
// inline content included, so a transaction that is too big is tried
// again in halves (j.update leaves nothing of a failed one).
func (j *Journal) dropNames(dir Ino, files []DirEntry, now int64, dropped *[]*inode) error {
	for len(files) > 0 {
		batch := files
		for {
			var gone []*inode
			tooBig := false
			err := j.update(func(txn *metalog.Txn) error {
				for _, e := range batch {
					n, err := j.getInode(txn, e.Ino)
					if err == nil {
						err = j.dropName(txn, dir, e.Name, n, now, &gone)
					}
					if err != nil {
						tooBig = errors.Is(err, metalog.ErrTxnTooBig)
						return err
					}
				}
				return nil
			})
			if tooBig && len(batch) > 1 {
				batch = batch[:len(batch)/2]
				continue
			}
			if err != nil {
				return err
			}
			*dropped = append(*dropped, gone...)
			break
		}
		files = files[len(batch):]
	}
	return nil
}

// graft writes snapshot entry e, and its subtree, as parent/name with
// fresh inode numbers, and returns how many inodes it wrote.
func (j *Journal) graft(ctx context.Context, parent Ino, name string, e *chunkstore.Entry, now int64) (uint64, error) {
	if err := j.checkInodeQuota(1); err != nil {
		return 0, err
	}
	top := *e
	top.Name = name
	links := make(map[uint64]Ino) // snapshot inode -> new inode, for hard links
	var ino Ino
	err := j.update(func(txn *metalog.Txn) error {
		var err error
		if ino, err = j.graftEntry(txn, parent, &top, links); err != nil {
			return err
		}
		return j.touchParent(txn, parent, e.Type == TypeDir, now)
	})
	if err != nil || e.Type != TypeDir {
		return 1, err
	}
	n, err := j.graftDir(ctx, ino, e.Subtree, links)
	return 1 + n, err
}

// graftDir writes the entries of tree into the new, empty directory dir.
func (j *Journal) graftDir(ctx context.Context, dir Ino, tree chunkstore.ID, links map[uint64]Ino) (uint64, error) {
	if tree.IsZero() {
		return 0, nil
	}
	t, err := j.store.Tree(ctx, tree)
	if err != nil {
		return 0, fmt.Errorf("%w: read a directory of the snapshot: %v", ErrIO, err)
	}
	if err := j.checkInodeQuota(uint64(len(t.Entries))); err != nil {
		return 0, err
	}
	subdirs := make([]Ino, len(t.Entries))
	// Each entry is written with the meta counters that count it, so
	// batches are split by the entries' sizes (inline content, xattrs).
	size := func(i int) (int, int) { return graftSize(&t.Entries[i]) }
	err = j.sizedBatches(len(t.Entries), loadBatch, size, func(start, end int) error {
		return j.update(func(txn *metalog.Txn) error {
			for i := start; i < end; i++ {
				ino, err := j.graftEntry(txn, dir, &t.Entries[i], links)
				if err != nil {
					return err
				}
				if t.Entries[i].Type == TypeDir {
					subdirs[i] = ino
					d, err := j.getInode(txn, dir) // one more link: the subdirectory's ".."
					if err != nil {
						return err
					}
					d.Nlink++
					if err := j.putInode(txn, d); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	n := uint64(len(t.Entries))
	for i := range t.Entries {
		if subdirs[i] != 0 {
			m, err := j.graftDir(ctx, subdirs[i], t.Entries[i].Subtree, links)
			if err != nil {
				return n, err
			}
			n += m
		}
	}
	return n, nil
}

// graftSize estimates the bytes and keys graftEntry writes for e, with
// the records of its new parent it may write too (inode, dirty marker).
func graftSize(e *chunkstore.Entry) (bytes, keys int) {
	const record = 160 // an inode record without its variable parts, and its key
	bytes = 3*record + 3*len(e.Name) + len(e.Inline) + len(e.Target) +
		(len(e.Chunks)+len(e.ChunkLists))*(chunkstore.IDSize+16)
	keys = 6
	for _, x := range e.Xattrs {
		bytes += 16 + len(x.Name) + len(x.Value)
		keys++
	}
	return bytes, keys
}

// graftEntry writes one snapshot entry into directory parent under a fresh
// inode number (or, for a hard link met before, as one more name of the
// inode written then), marked new. Directories start empty and loaded.
func (j *Journal) graftEntry(txn *metalog.Txn, parent Ino, e *chunkstore.Entry, links map[uint64]Ino) (Ino, error) {
	if e.Type != TypeDir && e.Nlink > 1 && links != nil {
		if ino, ok := links[e.Ino]; ok {
			n, err := j.getInode(txn, ino)
			if err != nil {
				return 0, err
			}
			n.Nlink++
			if err := j.putInode(txn, n); err != nil {
				return 0, err
			}
			if err := txn.Set(dentryKey(j.m.Epoch, parent, e.Name), dentryValue(ino, e.Type)); err != nil {
				return 0, err
			}
			if err := txn.Set(linkKey(j.m.Epoch, ino, parent, e.Name), nil); err != nil {
				return 0, err
			}
			return ino, j.markNew(txn, ino, parent)
		}
	}
	if e.Type == TypeRegular {
		if err := j.checkBytesQuota(0, e.Size); err != nil {
			return 0, err
		}
	}
	ino := Ino(j.m.NextIno)
	j.m.NextIno++
	j.prog.files.Add(1)
	n := &inode{Attr: Attr{
		Ino: ino, Type: e.Type, Mode: e.Mode, UID: e.UID, GID: e.GID, Size: e.Size,
		Nlink: 1, Rdev: e.Rdev, Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime,
	}}
	switch e.Type {
	case TypeDir:
		n.Nlink, n.Parent, n.Loaded, n.Size = 2, parent, true, 0
	case TypeSymlink:
		n.Target = e.Target
	case TypeRegular:
		n.Inline, n.Chunks, n.ChunkLists = e.Inline, e.Chunks, e.ChunkLists
		j.m.Bytes += e.Size
	}
	*j.m.count(e.Type)++
	for _, x := range e.Xattrs {
		if err := txn.Set(xattrKey(j.m.Epoch, ino, x.Name), x.Value); err != nil {
			return 0, err
		}
	}
	n.HasXattrs = len(e.Xattrs) > 0
	if err := j.putInode(txn, n); err != nil {
		return 0, err
	}
	if err := txn.Set(dentryKey(j.m.Epoch, parent, e.Name), dentryValue(ino, e.Type)); err != nil {
		return 0, err
	}
	if e.Type != TypeDir {
		if err := txn.Set(linkKey(j.m.Epoch, ino, parent, e.Name), nil); err != nil {
			return 0, err
		}
		if e.Nlink > 1 && links != nil {
			links[e.Ino] = ino
		}
	} else {
		j.loadedDirs[ino] = struct{}{}
	}
	return ino, j.markNew(txn, ino, parent)
}
