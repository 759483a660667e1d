package journal

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

// Rename moves parent/name to newParent/newName with renameat2(2)
// semantics: it replaces an existing target (a file by a non-directory, an
// empty directory by a directory), or fails with ErrExists under
// RenameNoReplace, or swaps the two under RenameExchange. A directory cannot
// move into its own subtree (ErrInvalid).
func (j *Journal) Rename(ctx context.Context, c Caller, parent Ino, name string, newParent Ino, newName string, flags RenameFlags) error {
	if err := j.lockW(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	exchange, noReplace := flags&RenameExchange != 0, flags&RenameNoReplace != 0
	if flags&^(RenameNoReplace|RenameExchange) != 0 || exchange && noReplace {
		return fmt.Errorf("rename flags %#x: %w", flags, ErrInvalid)
	}
	if err := j.ensureDir(ctx, parent); err != nil {
		return err
	}
	if err := j.ensureDir(ctx, newParent); err != nil {
		return err
	}
	if name == "." || name == ".." {
		return fmt.Errorf("rename %q: %w", name, ErrBusy)
	}
	if newName == "." || newName == ".." {
		if noReplace {
			return fmt.Errorf("rename to %q: %w", newName, ErrExists)
		}
		return fmt.Errorf("rename to %q: %w", newName, ErrBusy)
	}
	if err := checkName(name); err != nil {
		return err
	}
	// The checks Linux makes before locking anything, in its order.
	var srcIno, dstIno Ino
	var dstType Type
	var exists bool
	err := j.db.View(func(txn *metalog.Txn) error {
		var ok bool
		var err error
		if srcIno, _, ok, err = j.child(txn, parent, name); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("rename %q: %w", name, ErrNotFound)
		}
		if err := checkName(newName); err != nil {
			return err
		}
		if dstIno, dstType, exists, err = j.child(txn, newParent, newName); err != nil {
			return err
		}
		switch {
		case noReplace && exists:
			return fmt.Errorf("rename onto %q: %w", newName, ErrExists)
		case exchange && !exists:
			return fmt.Errorf("rename exchange with %q: %w", newName, ErrNotFound)
		}
		trap, err := j.renameTrap(txn, newParent, parent)
		if err != nil || trap == 0 {
			return err
		}
		switch {
		case srcIno == trap:
			return fmt.Errorf("rename %q into its own subtree: %w", name, ErrInvalid)
		case exists && dstIno == trap && exchange:
			return fmt.Errorf("exchange %q with an ancestor: %w", name, ErrInvalid)
		case exists && dstIno == trap:
			return fmt.Errorf("rename %q over an ancestor: %w", name, ErrNotEmpty)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if exists && dstIno == srcIno {
		return nil // two names of one inode (or the same name): nothing to do
	}
	if exists && dstType == TypeDir && !exchange {
		if err := j.ensureDir(ctx, dstIno); err != nil { // to see that it is empty
			return err
		}
	}
	now := j.cfg.Clock()
	var dropped []*inode
	err = j.update(func(txn *metalog.Txn) error {
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
		srcDir := src.Type == TypeDir
		var dst *inode
		dstDir := false
		if exists {
			if dst, err = j.getInode(txn, dstIno); err != nil {
				return err
			}
			dstDir = dst.Type == TypeDir
			if stickyDenied(c, dp, dst) {
				return fmt.Errorf("rename onto %q in a sticky directory: %w", newName, ErrPermission)
			}
			if !exchange && srcDir && !dstDir {
				return fmt.Errorf("rename directory onto %q: %w", newName, ErrNotDir)
			}
			if !exchange && !srcDir && dstDir {
				return fmt.Errorf("rename onto directory %q: %w", newName, ErrIsDir)
			}
		}
		if parent != newParent {
			if srcDir && !dstDir && dp.Nlink >= LinkMax {
				return fmt.Errorf("rename into directory %d: %w", newParent, ErrTooManyLinks)
			}
			if exchange && !srcDir && dstDir && sp.Nlink >= LinkMax {
				return fmt.Errorf("exchange into directory %d: %w", parent, ErrTooManyLinks)
			}
		}
		if !exchange && dstDir {
			if empty, err := j.isEmpty(txn, dstIno); err != nil {
				return err
			} else if !empty {
				return fmt.Errorf("rename onto %q: %w", newName, ErrNotEmpty)
			}
		}
		if exchange {
			return j.exchange(txn, src, sp, name, dst, dp, newName, now)
		}
		if exists {
			if dstDir {
				dp.Nlink-- // loses the replaced subdirectory
			}
			if err := j.dropName(txn, newParent, newName, dst, now, &dropped); err != nil {
				return err
			}
		}
		return j.moveName(txn, src, sp, name, dp, newName, now)
	})
	if err == nil {
		j.forget(dropped)
	}
	return err
}

// renameTrap is Linux's lock_rename trap: when one of the two directories
// is an ancestor of the other, the child of the ancestor on the path to the
// other (0 if neither is).
func (j *Journal) renameTrap(txn *metalog.Txn, newDir, oldDir Ino) (Ino, error) {
	if newDir == oldDir {
		return 0, nil
	}
	if t, err := j.childTowards(txn, oldDir, newDir); err != nil || t != 0 {
		return t, err
	}
	return j.childTowards(txn, newDir, oldDir)
}

// childTowards returns the child of anc that is desc or an ancestor of
// desc, or 0 when anc is not a proper ancestor of desc.
func (j *Journal) childTowards(txn *metalog.Txn, anc, desc Ino) (Ino, error) {
	for p := desc; p != RootIno; {
		n, err := j.getInode(txn, p)
		if err != nil {
			return 0, err
		}
		if n.Parent == anc {
			return p, nil
		}
		p = n.Parent
	}
	return 0, nil
}

// moveName moves src from sp/name to dp/newName (where nothing is).
func (j *Journal) moveName(txn *metalog.Txn, src, sp *inode, name string, dp *inode, newName string, now int64) error {
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
func (j *Journal) exchange(txn *metalog.Txn, src, sp *inode, name string, dst, dp *inode, newName string, now int64) error {
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

func (j *Journal) finishMove(txn *metalog.Txn, src, sp, dp *inode) error {
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
