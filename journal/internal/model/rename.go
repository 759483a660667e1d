package model

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/journal"
)

// Rename moves name in parent to newName in newParent, following
// renameat2(2) on Linux, checks in this order:
//
//  1. flags other than NOREPLACE and EXCHANGE, or both: ErrInvalid;
//  2. parent, then newParent: ErrNotFound, ErrNotDir;
//  3. name "." or "..": ErrBusy; newName "." or "..": ErrExists with
//     NOREPLACE, else ErrBusy; then the syntax of each name;
//  4. the source must exist (ErrNotFound); the target: ErrExists with
//     NOREPLACE, ErrNotFound with EXCHANGE when absent;
//  5. the source is newParent or one of its ancestors: ErrInvalid; the
//     target is parent or one of its ancestors: ErrNotEmpty (ErrInvalid
//     with EXCHANGE);
//  6. source and target are the same inode (two hard links, or one name):
//     success, nothing changes;
//  7. sticky parent: ErrPermission for the source, then for the target;
//  8. without EXCHANGE: a directory over a non-directory ErrNotDir, a
//     non-directory over a directory ErrIsDir;
//  9. a directory moving to a newParent at LinkMax: ErrTooManyLinks;
//  10. a non-empty target directory: ErrNotEmpty.
//
// On success both parents get mtime and ctime, the moved inodes (and a
// replaced one that keeps links) ctime.
func (m *Model) Rename(ctx context.Context, c journal.Caller, parent journal.Ino, name string, newParent journal.Ino, newName string, flags journal.RenameFlags) error {
	exchange := flags&journal.RenameExchange != 0
	noReplace := flags&journal.RenameNoReplace != 0
	if flags&^(journal.RenameExchange|journal.RenameNoReplace) != 0 || exchange && noReplace {
		return fmt.Errorf("rename flags %#x: %w", flags, journal.ErrInvalid)
	}
	od, err := m.dir(parent)
	if err != nil {
		return err
	}
	nd, err := m.dir(newParent)
	if err != nil {
		return err
	}
	if isDot(name) {
		return fmt.Errorf("rename %q: %w", name, journal.ErrBusy)
	}
	if isDot(newName) {
		if noReplace {
			return fmt.Errorf("rename to %q: %w", newName, journal.ErrExists)
		}
		return fmt.Errorf("rename to %q: %w", newName, journal.ErrBusy)
	}
	if err := checkName(name); err != nil {
		return err
	}
	srcIno, ok := od.entries[name]
	if !ok {
		return fmt.Errorf("rename %q in %d: %w", name, parent, journal.ErrNotFound)
	}
	if err := checkName(newName); err != nil {
		return err
	}
	dstIno, exists := nd.entries[newName]
	if noReplace && exists {
		return fmt.Errorf("rename to %q in %d: %w", newName, newParent, journal.ErrExists)
	}
	if exchange && !exists {
		return fmt.Errorf("exchange with %q in %d: %w", newName, newParent, journal.ErrNotFound)
	}
	if trap := m.renameTrap(newParent, parent); trap != 0 {
		if srcIno == trap {
			return fmt.Errorf("rename %q into itself: %w", name, journal.ErrInvalid)
		}
		if exists && dstIno == trap {
			if exchange {
				return fmt.Errorf("exchange %q with an ancestor: %w", name, journal.ErrInvalid)
			}
			return fmt.Errorf("rename %q over an ancestor: %w", name, journal.ErrNotEmpty)
		}
	}
	if exists && srcIno == dstIno {
		return nil
	}
	src := m.inodes[srcIno]
	if stickyDenied(c, od, src) {
		return fmt.Errorf("rename %q from sticky directory %d: %w", name, parent, journal.ErrPermission)
	}
	srcDir := src.attr.Type == journal.TypeDir
	var dst *inode
	dstDir := false
	if exists {
		dst = m.inodes[dstIno]
		dstDir = dst.attr.Type == journal.TypeDir
		if stickyDenied(c, nd, dst) {
			return fmt.Errorf("rename over %q in sticky directory %d: %w", newName, newParent, journal.ErrPermission)
		}
		if !exchange && srcDir && !dstDir {
			return fmt.Errorf("rename directory %q over %q: %w", name, newName, journal.ErrNotDir)
		}
		if !exchange && !srcDir && dstDir {
			return fmt.Errorf("rename %q over directory %q: %w", name, newName, journal.ErrIsDir)
		}
	}
	if parent != newParent {
		if srcDir && !dstDir && m.attr(nd).Nlink >= journal.LinkMax {
			return fmt.Errorf("rename %q into %d: %w", name, newParent, journal.ErrTooManyLinks)
		}
		if exchange && !srcDir && dstDir && m.attr(od).Nlink >= journal.LinkMax {
			return fmt.Errorf("exchange %q into %d: %w", newName, parent, journal.ErrTooManyLinks)
		}
	}
	if !exchange && dstDir && len(dst.entries) > 0 {
		return fmt.Errorf("rename over %q in %d: %w", newName, newParent, journal.ErrNotEmpty)
	}

	now := m.clock()
	if exchange {
		od.entries[name], nd.entries[newName] = dstIno, srcIno
		if dstDir {
			dst.parent = parent
		}
		dst.attr.Ctime = now
	} else {
		if exists {
			m.remove(nd, newName, dst, now)
		}
		delete(od.entries, name)
		nd.entries[newName] = srcIno
	}
	if srcDir {
		src.parent = newParent
	}
	src.attr.Ctime = now
	touchDir(od, now)
	touchDir(nd, now)
	return nil
}

// renameTrap mirrors the kernel's lock_rename(newDir, oldDir): when the
// directories differ and one is a proper ancestor of the other, it
// returns that ancestor's child on the path to the other one; else 0.
func (m *Model) renameTrap(newDir, oldDir journal.Ino) journal.Ino {
	if newDir == oldDir {
		return 0
	}
	if t := m.childTowards(oldDir, newDir); t != 0 {
		return t
	}
	return m.childTowards(newDir, oldDir)
}

// childTowards returns the child of anc that is desc or an ancestor of
// desc, or 0 when anc is not a proper ancestor of desc.
func (m *Model) childTowards(anc, desc journal.Ino) journal.Ino {
	for p := desc; p != journal.RootIno; {
		up := m.inodes[p].parent
		if up == anc {
			return p
		}
		p = up
	}
	return 0
}
