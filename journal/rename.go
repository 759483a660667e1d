package journal

import (
	"context"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Rename moves parent/name to newParent/newName with renameat2(2)
// semantics: it replaces an existing target (a file by a non-directory, an
// empty directory by a directory), or fails with ErrExists under
// RenameNoReplace, or swaps the two under RenameExchange. A directory cannot
// move into its own subtree (ErrInvalid).
func (j *Journal) Rename(ctx context.Context, c Caller, parent Ino, name string, newParent Ino, newName string, flags RenameFlags) error {
	if err := j.lock(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return fmt.Errorf("rename flags %#x: %w", flags, ErrInvalid)
	}
	for _, n := range []string{name, newName} {
		if n == "." || n == ".." {
			return fmt.Errorf("rename %q: %w", n, ErrBusy)
		}
	}
	if len(name) > NameMax {
		return fmt.Errorf("rename: %w", ErrNameTooLong)
	}
	if err := checkName(newName); err != nil {
		return err
	}
	if err := j.ensureDir(ctx, parent); err != nil {
		return err
	}
	if err := j.ensureDir(ctx, newParent); err != nil {
		return err
	}
	// Directories whose emptiness or entries matter must be loaded first.
	var srcIno, dstIno Ino
	var srcType, dstType Type
	var dstOK bool
	err := j.db.View(func(txn *badger.Txn) error {
		var ok bool
		var err error
		srcIno, srcType, ok, err = j.child(txn, parent, name)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("rename %q: %w", name, ErrNotFound)
		}
		dstIno, dstType, dstOK, err = j.child(txn, newParent, newName)
		return err
	})
	if err != nil {
		return err
	}
	if dstOK && dstType == TypeDir && flags&RenameExchange == 0 {
		if err := j.ensureDir(ctx, dstIno); err != nil {
			return err
		}
	}
	now := j.cfg.Clock()
	var dropped []*inode
	err = j.update(func(txn *badger.Txn) error {
		switch {
		case flags&RenameExchange != 0 && !dstOK:
			return fmt.Errorf("rename exchange with %q: %w", newName, ErrNotFound)
		case flags&RenameNoReplace != 0 && dstOK:
			return fmt.Errorf("rename onto %q: %w", newName, ErrExists)
		}
		if dstOK && dstIno == srcIno {
			return nil // two names of one inode (or the same name): nothing to do
		}
		src, err := j.getInode(txn, srcIno)
		if err != nil {
			return err
		}
		sp, err := j.getInode(txn, parent)
		if err != nil {
			return err
		}
		dp := sp
		if newParent != parent {
			if dp, err = j.getInode(txn, newParent); err != nil {
				return err
			}
		}
		if stickyDenied(c, sp, src) {
			return fmt.Errorf("rename %q out of a sticky directory: %w", name, ErrPermission)
		}
		if srcType == TypeDir && newParent != parent {
			if err := j.checkNotAncestor(txn, srcIno, newParent); err != nil {
				return err
			}
		}
		if !dstOK {
			return j.moveName(txn, src, sp, name, dp, newName, now)
		}
		dst, err := j.getInode(txn, dstIno)
		if err != nil {
			return err
		}
		if stickyDenied(c, dp, dst) {
			return fmt.Errorf("rename onto %q in a sticky directory: %w", newName, ErrPermission)
		}
		if flags&RenameExchange != 0 {
			if dstType == TypeDir && newParent != parent {
				if err := j.checkNotAncestor(txn, dstIno, parent); err != nil {
					return err
				}
			}
			return j.exchange(txn, src, sp, name, dst, dp, newName, now)
		}
		switch {
		case srcType == TypeDir && dstType != TypeDir:
			return fmt.Errorf("rename directory onto %q: %w", newName, ErrNotDir)
		case srcType != TypeDir && dstType == TypeDir:
			return fmt.Errorf("rename onto directory %q: %w", newName, ErrIsDir)
		case dstType == TypeDir:
			if empty, err := j.isEmpty(txn, dstIno); err != nil {
				return err
			} else if !empty {
				return fmt.Errorf("rename onto %q: %w", newName, ErrNotEmpty)
			}
			dp.Nlink-- // loses the replaced subdirectory
		}
		if err := j.dropName(txn, newParent, newName, dst, now, &dropped); err != nil {
			return err
		}
		return j.moveName(txn, src, sp, name, dp, newName, now)
	})
	if err == nil {
		j.forget(dropped)
	}
	return err
}

// checkNotAncestor fails with ErrInvalid if dir is target or one of its
// ancestors (moving dir under target would make a cycle).
func (j *Journal) checkNotAncestor(txn *badger.Txn, dir, target Ino) error {
	for cur := target; ; {
		if cur == dir {
			return fmt.Errorf("rename directory %d into its own subtree: %w", dir, ErrInvalid)
		}
		if cur == RootIno {
			return nil
		}
		n, err := j.getInode(txn, cur)
		if err != nil {
			return err
		}
		cur = n.Parent
	}
}

// moveName moves src from sp/name to dp/newName (where nothing is).
func (j *Journal) moveName(txn *badger.Txn, src, sp *inode, name string, dp *inode, newName string, now int64) error {
	if err := txn.Delete(dentryKey(j.m.Epoch, sp.Ino, name)); err != nil {
		return err
	}
	if err := txn.Set(dentryKey(j.m.Epoch, dp.Ino, newName), dentryValue(src.Ino, src.Type)); err != nil {
		return err
	}
	if src.Type == TypeDir {
		if sp.Ino != dp.Ino {
			src.Parent = dp.Ino
			sp.Nlink--
			dp.Nlink++
			if dp.Nlink > LinkMax {
				return fmt.Errorf("rename into directory %d: %w", dp.Ino, ErrTooManyLinks)
			}
		}
	} else {
		if err := txn.Delete(linkKey(j.m.Epoch, src.Ino, sp.Ino, name)); err != nil {
			return err
		}
		if err := txn.Set(linkKey(j.m.Epoch, src.Ino, dp.Ino, newName), nil); err != nil {
			return err
		}
	}
	src.Ctime = now
	sp.Mtime, sp.Ctime = now, now
	dp.Mtime, dp.Ctime = now, now
	return j.finishMove(txn, src, sp, dp)
}

// exchange swaps sp/name (src) and dp/newName (dst).
func (j *Journal) exchange(txn *badger.Txn, src, sp *inode, name string, dst, dp *inode, newName string, now int64) error {
	if err := txn.Set(dentryKey(j.m.Epoch, sp.Ino, name), dentryValue(dst.Ino, dst.Type)); err != nil {
		return err
	}
	if err := txn.Set(dentryKey(j.m.Epoch, dp.Ino, newName), dentryValue(src.Ino, src.Type)); err != nil {
		return err
	}
	relink := func(n *inode, fromDir Ino, fromName string, toDir Ino, toName string) error {
		if n.Type == TypeDir {
			if fromDir != toDir {
				n.Parent = toDir
			}
			return nil
		}
		if err := txn.Delete(linkKey(j.m.Epoch, n.Ino, fromDir, fromName)); err != nil {
			return err
		}
		return txn.Set(linkKey(j.m.Epoch, n.Ino, toDir, toName), nil)
	}
	if err := relink(src, sp.Ino, name, dp.Ino, newName); err != nil {
		return err
	}
	if err := relink(dst, dp.Ino, newName, sp.Ino, name); err != nil {
		return err
	}
	if sp.Ino != dp.Ino {
		if src.Type == TypeDir {
			sp.Nlink--
			dp.Nlink++
		}
		if dst.Type == TypeDir {
			dp.Nlink--
			sp.Nlink++
		}
	}
	src.Ctime, dst.Ctime = now, now
	sp.Mtime, sp.Ctime = now, now
	dp.Mtime, dp.Ctime = now, now
	if err := j.putInode(txn, dst); err != nil {
		return err
	}
	if err := j.markDirty(txn, dst); err != nil {
		return err
	}
	return j.finishMove(txn, src, sp, dp)
}

func (j *Journal) finishMove(txn *badger.Txn, src, sp, dp *inode) error {
	for _, n := range []*inode{src, sp, dp} {
		if err := j.putInode(txn, n); err != nil {
			return err
		}
	}
	if err := j.markDirty(txn, src); err != nil {
		return err
	}
	if err := j.markDirUp(txn, sp.Ino); err != nil {
		return err
	}
	return j.markDirUp(txn, dp.Ino)
}
