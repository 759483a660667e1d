package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/cairnfs/cairn/chunkstore"
)

// Directories of the base snapshot are loaded lazily: a directory inode
// starts with its base tree's ID and Loaded false; the first operation that
// needs its entries copies them into dentries and child inodes. Opening a
// workspace is therefore O(1) whatever its size.

// loadBatch is how many entries one transaction loads: Badger limits the
// size of a transaction.
const loadBatch = 2000

// load returns dir with its entries loaded, and the base tree it loaded
// them from (nil if dir was loaded before). dir must be a directory.
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
	// The directory's own record, marked loaded, is written in the last
	// batch's transaction: a directory of up to loadBatch entries loads in
	// one commit (a cold walk of a source tree is mostly such directories).
	loaded := *dir
	loaded.Loaded = true
	if dir.Ino == RootIno {
		loaded.Nlink = 2 + subdirs // the root has no tree entry to carry it
	}
	// Loading a directory is part of reading it: it may use the reserve.
	defer j.useReserve()()
	for start := 0; ; start += loadBatch {
		batch := tree.Entries[start:min(start+loadBatch, len(tree.Entries))]
		last := start+loadBatch >= len(tree.Entries)
		err := j.write(func(txn *badger.Txn) error {
			for i := range batch {
				if err := j.loadEntry(txn, dir.Ino, &batch[i]); err != nil {
					return err
				}
			}
			if last {
				return j.putInode(txn, &loaded)
			}
			return nil
		})
		if errors.Is(err, ErrNoSpace) {
			return nil, nil, fmt.Errorf("load directory %d: %w", dir.Ino, err)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: load directory %d: %v", ErrIO, dir.Ino, err)
		}
		if last {
			break
		}
	}
	dir.Loaded, dir.Nlink = true, loaded.Nlink
	return dir, tree, nil
}

// loadEntry copies one base tree entry into the journal. A hardlinked inode
// met before (through another of its names) keeps its record.
func (j *Journal) loadEntry(txn *badger.Txn, parent Ino, e *chunkstore.Entry) error {
	ino := Ino(e.Ino)
	if err := txn.Set(dentryKey(j.m.Epoch, parent, e.Name), dentryValue(ino, e.Type)); err != nil {
		return err
	}
	if e.Type != chunkstore.TypeDir {
		if err := txn.Set(linkKey(j.m.Epoch, ino, parent, e.Name), nil); err != nil {
			return err
		}
	}
	// Only an inode with other names (a hardlink group) can have been
	// loaded before, through one of them; a directory or a single-link
	// file has its one name here, in a directory loaded for the first
	// time. Skipping the lookup for those takes 15% off BenchmarkColdWalk.
	if e.Type != chunkstore.TypeDir && e.Nlink > 1 {
		_, err := txn.Get(inodeKey(j.m.Epoch, ino))
		if err == nil {
			return nil
		}
		if !errors.Is(err, badger.ErrKeyNotFound) {
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
		if err := txn.Set(xattrKey(j.m.Epoch, ino, x.Name), x.Value); err != nil {
			return err
		}
	}
	n.HasXattrs = len(e.Xattrs) > 0
	return j.putInode(txn, n)
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
	err := j.db.View(func(txn *badger.Txn) error {
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
