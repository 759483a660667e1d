package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnfs/cairn/journal/internal/metalog"

	"github.com/cairnfs/cairn/chunkstore"
)

// Directories of the base snapshot are loaded lazily: a directory inode
// starts with its base tree's ID and Loaded false; the first operation that
// needs its entries copies them into dentries and child inodes. Opening a
// workspace is therefore O(1) whatever its size.

// loadBatch is how many entries one transaction of a directory load (and
// of removeAll, graftDir, a snapshot's record updates) takes at most;
// fewer if Badger's size limit comes first (small files' inline content).
const loadBatch = 2000

// load returns dir with its entries loaded, and the base tree it loaded
// them from (nil if dir was loaded before). dir must be a directory.
//
// A directory loads in one transaction if it fits (a cold walk of a source
// tree is mostly such directories), else in as many as Badger's limits
// need (writeSplit), of at most loadBatch entries. Its own record, marked loaded, is written last: a load cut
// short (a crash, a full disk) leaves the directory unloaded, and the next
// access loads it again. Entries written by the part that was committed are
// then written again with the same keys and values (a hardlinked inode
// written then keeps its record, the one this load would write), and
// nothing reaches them before the directory is loaded: they are harmless.
func (j *Journal) load(ctx context.Context, dir *inode) (*inode, *chunkstore.Tree, error) {
	if dir.Loaded {
		return dir, nil, nil
	}
	tree, err := j.store.Tree(ctx, dir.Tree)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: load directory %d from the store: %v", ErrIO, dir.Ino, err)
	}
	subdirs := uint32(0)
	for i := range tree.Entries {
		if tree.Entries[i].Type == chunkstore.TypeDir {
			subdirs++
		}
	}
	loaded := *dir
	loaded.Loaded = true
	if dir.Ino == RootIno {
		loaded.Nlink = 2 + subdirs // the root has no tree entry to carry it
	}
	// Loading a directory is part of reading it: it may use the reserve.
	defer j.useReserve()()
	err = j.writeSplit(func(w *splitWriter) error {
		for i := range tree.Entries {
			if i > 0 && i%loadBatch == 0 {
				if err := w.next(); err != nil {
					return err
				}
			}
			if err := j.loadEntry(w, dir.Ino, &tree.Entries[i]); err != nil {
				return err
			}
		}
		return w.putInode(&loaded)
	})
	if errors.Is(err, ErrNoSpace) {
		return nil, nil, fmt.Errorf("load directory %d: %w", dir.Ino, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: load directory %d: %v", ErrIO, dir.Ino, err)
	}
	dir.Loaded, dir.Nlink = true, loaded.Nlink
	return dir, tree, nil
}

// loadEntry copies one base tree entry into the journal. A hardlinked inode
// met before (through another of its names) keeps its record.
func (j *Journal) loadEntry(w *splitWriter, parent Ino, e *chunkstore.Entry) error {
	ino := Ino(e.Ino)
	if err := w.set(dentryKey(j.m.Epoch, parent, e.Name), dentryValue(ino, e.Type)); err != nil {
		return err
	}
	if e.Type != chunkstore.TypeDir {
		if err := w.set(linkKey(j.m.Epoch, ino, parent, e.Name), nil); err != nil {
			return err
		}
	}
	// Only an inode with other names (a hardlink group) can have been
	// loaded before, through one of them; a directory or a single-link
	// file has its one name here, in a directory loaded for the first
	// time. Skipping the lookup for those takes 15% off BenchmarkColdWalk.
	if e.Type != chunkstore.TypeDir && e.Nlink > 1 {
		_, err := w.txn.Get(inodeKey(j.m.Epoch, ino))
		if err == nil {
			return nil
		}
		if !errors.Is(err, metalog.ErrKeyNotFound) {
			return err
		}
	}
	n := &inode{Attr: Attr{
		Ino: ino, Type: e.Type, Mode: e.Mode, UID: e.UID, GID: e.GID, Size: e.Size,
		Nlink: e.Nlink, Rdev: e.Rdev, Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime,
	}}
	switch e.Type {
	case chunkstore.TypeDir:
		n.Parent, n.Tree = parent, e.Subtree
	case chunkstore.TypeSymlink:
		n.Target = e.Target
	case chunkstore.TypeRegular:
		n.Inline, n.Chunks, n.ChunkLists = e.Inline, e.Chunks, e.ChunkLists
	}
	for _, x := range e.Xattrs {
		if err := w.set(xattrKey(j.m.Epoch, ino, x.Name), x.Value); err != nil {
			return err
		}
	}
	n.HasXattrs = len(e.Xattrs) > 0
	return w.putInode(n)
}

// ensureDir checks that ino is a directory and loads its entries, before
// the operation's own transaction (whose snapshot must include them).
func (j *Journal) ensureDir(ctx context.Context, ino Ino) error {
	_, err := j.ensureDirTree(ctx, ino)
	return err
}

// ensureDirTree is ensureDir that also returns the base tree the entries
// were loaded from, if this call loaded them (else nil): the directory's
// entries are then exactly the tree's, in the same (bytewise) order.
func (j *Journal) ensureDirTree(ctx context.Context, ino Ino) (*chunkstore.Tree, error) {
	if _, ok := j.loadedDirs[ino]; ok {
		return nil, nil
	}
	var n *inode
	err := j.db.View(func(txn *metalog.Txn) error {
		var err error
		n, err = j.getInode(txn, ino)
		return err
	})
	if err != nil {
		return nil, err
	}
	if n.Type != TypeDir {
		return nil, fmt.Errorf("inode %d: %w", ino, ErrNotDir)
	}
	_, tree, err := j.load(ctx, n)
	if err != nil {
		return nil, err
	}
	j.loadedDirs[ino] = struct{}{}
	return tree, nil
}
