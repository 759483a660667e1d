package journal

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

// checkName validates a name (not "." or "..", handled by each operation).
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name: %w", ErrNotFound)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("name %q: %w", name, ErrInvalid)
	case len(name) > NameMax:
		return fmt.Errorf("name of %d bytes: %w", len(name), ErrNameTooLong)
	}
	return nil
}

// checkNewName validates the name of a new entry.
func checkNewName(name string) error {
	if name == "." || name == ".." {
		return fmt.Errorf("create %q: %w", name, ErrExists)
	}
	return checkName(name)
}

// child looks up name in the loaded directory parent.
func (j *Journal) child(txn *metalog.Txn, parent Ino, name string) (Ino, Type, bool, error) {
	item, err := txn.Get(dentryKey(j.m.Epoch, parent, name))
	if errors.Is(err, metalog.ErrKeyNotFound) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	var ino Ino
	var t Type
	err = item.Value(func(v []byte) error {
		var ok bool
		if ino, t, ok = parseDentry(v); !ok {
			return fmt.Errorf("%w: bad directory entry %q in %d", ErrIO, name, parent)
		}
		return nil
	})
	return ino, t, err == nil, err
}

// Lookup returns the attributes of name in directory parent.
func (j *Journal) Lookup(ctx context.Context, parent Ino, name string) (Attr, error) {
	if err := j.lock(); err != nil {
		return Attr{}, err
	}
	defer j.mu.Unlock()
	if err := j.ensureDir(ctx, parent); err != nil {
		return Attr{}, err
	}
	if name != "." && name != ".." {
		if err := checkName(name); err != nil {
			return Attr{}, err
		}
	}
	var a Attr
	err := j.db.View(func(txn *metalog.Txn) error {
		if name == "." || name == ".." {
			d, err := j.getInode(txn, parent)
			if err != nil {
				return err
			}
			if name == ".." {
				if d, err = j.getInode(txn, d.Parent); err != nil {
					return err
				}
			}
			a = d.Attr
			return nil
		}
		ino, _, ok, err := j.child(txn, parent, name)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("lookup %q in %d: %w", name, parent, ErrNotFound)
		}
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		a = n.Attr
		return nil
	})
	if err == nil && j.writers[a.Ino] != nil {
		return j.adoptAttr(a.Ino)
	}
	return a, err
}

// LookupAll is Lookup of each of names in parent, under one lock and one
// read transaction: a directory listing with attributes (READDIRPLUS)
// costs one call per batch, not one per entry. errs[i] is Lookup's error
// for names[i] ("." and ".." are not names here).
func (j *Journal) LookupAll(ctx context.Context, parent Ino, names []string) (attrs []Attr, errs []error, err error) {
	if err := j.lock(); err != nil {
		return nil, nil, err
	}
	defer j.mu.Unlock()
	if err := j.ensureDir(ctx, parent); err != nil {
		return nil, nil, err
	}
	attrs, errs = make([]Attr, len(names)), make([]error, len(names))
	err = j.db.View(func(txn *metalog.Txn) error {
		for i, name := range names {
			if errs[i] = checkName(name); errs[i] != nil {
				continue
			}
			ino, _, ok, err := j.child(txn, parent, name)
			if err != nil {
				return err
			}
			if !ok {
				errs[i] = fmt.Errorf("lookup %q in %d: %w", name, parent, ErrNotFound)
				continue
			}
			n, err := j.getInode(txn, ino)
			if err != nil {
				errs[i] = err
				continue
			}
			attrs[i] = n.Attr
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(j.writers) > 0 {
		for i := range attrs {
			if errs[i] == nil && j.writers[attrs[i].Ino] != nil {
				attrs[i], errs[i] = j.adoptAttr(attrs[i].Ino)
			}
		}
	}
	return attrs, errs, nil
}

// GetAttr returns an inode's attributes.
func (j *Journal) GetAttr(ctx context.Context, ino Ino) (Attr, error) {
	if err := j.lock(); err != nil {
		return Attr{}, err
	}
	defer j.mu.Unlock()
	if err := j.adopt(ino); err != nil {
		return Attr{}, err
	}
	var a Attr
	err := j.db.View(func(txn *metalog.Txn) error {
		n, err := j.getInode(txn, ino)
		if err == nil {
			a = n.Attr
		}
		return err
	})
	if err == nil && a.Type == TypeDir && a.Nlink == 0 {
		// The root of a base snapshot: its link count is known once loaded.
		if err := j.ensureDir(ctx, ino); err != nil {
			return Attr{}, err
		}
		return j.getAttrLocked(ino)
	}
	return a, err
}

func (j *Journal) getAttrLocked(ino Ino) (Attr, error) {
	var a Attr
	err := j.db.View(func(txn *metalog.Txn) error {
		n, err := j.getInode(txn, ino)
		if err == nil {
			a = n.Attr
		}
		return err
	})
	return a, err
}

// Create makes a regular file. mode is used as given (the kernel applied the
// umask already).
func (j *Journal) Create(ctx context.Context, c Caller, parent Ino, name string, mode uint32) (Attr, error) {
	return j.mknode(ctx, c, parent, name, TypeRegular, mode, 0, "")
}

// Mknod makes a regular file, FIFO, socket or device node.
func (j *Journal) Mknod(ctx context.Context, c Caller, parent Ino, name string, t Type, mode uint32, rdev uint64) (Attr, error) {
	switch t {
	case TypeRegular, TypeFIFO, TypeSocket:
		rdev = 0
	case TypeCharDev, TypeBlockDev:
	case TypeDir:
		return Attr{}, fmt.Errorf("mknod of a directory: %w", ErrPermission)
	default:
		return Attr{}, fmt.Errorf("mknod of type %v: %w", t, ErrInvalid)
	}
	return j.mknode(ctx, c, parent, name, t, mode, rdev, "")
}

// Mkdir makes a directory.
func (j *Journal) Mkdir(ctx context.Context, c Caller, parent Ino, name string, mode uint32) (Attr, error) {
	return j.mknode(ctx, c, parent, name, TypeDir, mode&(0o777|ModeSticky), 0, "")
}

// Symlink makes a symbolic link to target.
func (j *Journal) Symlink(ctx context.Context, c Caller, parent Ino, name, target string) (Attr, error) {
	switch {
	case target == "":
		return Attr{}, fmt.Errorf("empty symlink target: %w", ErrNotFound)
	case len(target) > SymlinkMax:
		return Attr{}, fmt.Errorf("symlink target of %d bytes: %w", len(target), ErrNameTooLong)
	case strings.IndexByte(target, 0) >= 0:
		return Attr{}, fmt.Errorf("symlink target with a NUL: %w", ErrInvalid)
	}
	return j.mknode(ctx, c, parent, name, TypeSymlink, 0o777, 0, target)
}

func (j *Journal) mknode(ctx context.Context, c Caller, parent Ino, name string, t Type, mode uint32, rdev uint64, target string) (Attr, error) {
	if err := j.lockW(); err != nil {
		return Attr{}, err
	}
	defer j.mu.Unlock()
	if err := j.checkMknode(ctx, parent, name); err != nil {
		return Attr{}, err
	}
	return j.mknodeLocked(c, parent, name, t, mode, rdev, target, nil)
}

// checkMknode makes the checks of a new name in parent that precede its
// transaction.
func (j *Journal) checkMknode(ctx context.Context, parent Ino, name string) error {
	if err := j.ensureDir(ctx, parent); err != nil {
		return err
	}
	if err := checkNewName(name); err != nil {
		return err
	}
	return j.checkInodeQuota(1)
}

// mknodeLocked makes the new inode in one transaction, after checkMknode.
// prep, if not nil, may change the new inode before it is written and add
// to the transaction.
func (j *Journal) mknodeLocked(c Caller, parent Ino, name string, t Type, mode uint32, rdev uint64, target string, prep func(txn *metalog.Txn, n *inode) error) (Attr, error) {
	now := j.cfg.Clock()
	var a Attr
	err := j.update(func(txn *metalog.Txn) error {
		p, err := j.getInode(txn, parent)
		if err != nil {
			return err
		}
		if _, _, exists, err := j.child(txn, parent, name); err != nil {
			return err
		} else if exists {
			return fmt.Errorf("create %q: %w", name, ErrExists)
		}
		n := &inode{Attr: Attr{
			Ino: Ino(j.m.NextIno), Type: t, Mode: mode & ModePerm, UID: c.UID, GID: c.GID,
			Nlink: 1, Rdev: rdev, Atime: now, Mtime: now, Ctime: now,
		}}
		if p.Mode&ModeSetgid != 0 { // BSD group semantics of setgid directories
			n.GID = p.GID
			if t == TypeDir {
				n.Mode |= ModeSetgid
			} else if n.Mode&(ModeSetgid|0o010) == ModeSetgid|0o010 && !c.InGroup(n.GID) && !c.Privileged() {
				n.Mode &^= ModeSetgid
			}
		}
		switch t {
		case TypeDir:
			n.Nlink, n.Parent, n.Loaded = 2, parent, true
			p.Nlink++
		case TypeSymlink:
			n.Target, n.Size = target, uint64(len(target))
		}
		if t == TypeDir && p.Nlink > LinkMax {
			return fmt.Errorf("mkdir %q: %w", name, ErrTooManyLinks)
		}
		j.m.NextIno++
		*j.m.count(t)++
		p.Mtime, p.Ctime = now, now
		if prep != nil {
			if err := prep(txn, n); err != nil {
				return err
			}
		}
		if err := j.putInode(txn, n); err != nil {
			return err
		}
		if err := j.putInode(txn, p); err != nil {
			return err
		}
		if err := txn.Set(dentryKey(j.m.Epoch, parent, name), dentryValue(n.Ino, t)); err != nil {
			return err
		}
		if t != TypeDir {
			if err := txn.Set(linkKey(j.m.Epoch, n.Ino, parent, name), nil); err != nil {
				return err
			}
		}
		if err := j.markNew(txn, n.Ino, parent); err != nil {
			return err
		}
		a = n.Attr
		return nil
	})
	if err == nil && t == TypeDir {
		j.loadedDirs[a.Ino] = struct{}{}
	}
	return a, err
}

// Readlink returns a symlink's target.
func (j *Journal) Readlink(ctx context.Context, ino Ino) (string, error) {
	if err := j.lock(); err != nil {
		return "", err
	}
	defer j.mu.Unlock()
	var target string
	err := j.db.View(func(txn *metalog.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		if n.Type != TypeSymlink {
			return fmt.Errorf("readlink of inode %d: %w", ino, ErrInvalid)
		}
		target = n.Target
		return nil
	})
	return target, err
}

// Link adds the name newName in newParent for the non-directory ino.
func (j *Journal) Link(ctx context.Context, c Caller, ino Ino, newParent Ino, newName string) (Attr, error) {
	if err := j.lockW(); err != nil {
		return Attr{}, err
	}
	defer j.mu.Unlock()
	if err := j.adopt(ino); err != nil {
		return Attr{}, err
	}
	if err := j.ensureDir(ctx, newParent); err != nil {
		return Attr{}, err
	}
	if err := checkNewName(newName); err != nil {
		return Attr{}, err
	}
	now := j.cfg.Clock()
	var a Attr
	err := j.update(func(txn *metalog.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		if n.Type == TypeDir {
			return fmt.Errorf("link to directory %d: %w", ino, ErrPermission)
		}
		if n.Nlink >= LinkMax {
			return fmt.Errorf("link to inode %d: %w", ino, ErrTooManyLinks)
		}
		if n.Nlink == 0 { // unlinked, still open
			return fmt.Errorf("link to unlinked inode %d: %w", ino, ErrNotFound)
		}
		if _, _, exists, err := j.child(txn, newParent, newName); err != nil {
			return err
		} else if exists {
			return fmt.Errorf("link %q: %w", newName, ErrExists)
		}
		p, err := j.getInode(txn, newParent)
		if err != nil {
			return err
		}
		n.Nlink++
		n.Ctime = now
		p.Mtime, p.Ctime = now, now
		for _, err := range []error{
			j.putInode(txn, n), j.putInode(txn, p),
			txn.Set(dentryKey(j.m.Epoch, newParent, newName), dentryValue(ino, n.Type)),
			txn.Set(linkKey(j.m.Epoch, ino, newParent, newName), nil),
		} {
			if err != nil {
				return err
			}
		}
		a = n.Attr
		if err := j.markDirty(txn, n); err != nil {
			return err
		}
		return j.markDirUp(txn, newParent)
	})
	return a, err
}

// stickyDenied applies the sticky-directory rule: in a sticky directory only
// root, the directory's owner or the entry's owner may remove or rename an
// entry.
func stickyDenied(c Caller, dir, child *inode) bool {
	return dir.Mode&ModeSticky != 0 && !c.Privileged() && c.UID != dir.UID && c.UID != child.UID
}

// Unlink removes a non-directory name.
func (j *Journal) Unlink(ctx context.Context, c Caller, parent Ino, name string) error {
	return j.remove(ctx, c, parent, name, false)
}

// Rmdir removes an empty directory.
func (j *Journal) Rmdir(ctx context.Context, c Caller, parent Ino, name string) error {
	return j.remove(ctx, c, parent, name, true)
}

func (j *Journal) remove(ctx context.Context, c Caller, parent Ino, name string, isDir bool) error {
	if err := j.lockW(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	defer j.useReserve()() // removing frees space: it works on a full disk
	if err := j.ensureDir(ctx, parent); err != nil {
		return err
	}
	switch {
	case name == "." && isDir:
		return fmt.Errorf("rmdir %q: %w", name, ErrInvalid)
	case name == ".." && isDir:
		return fmt.Errorf("rmdir %q: %w", name, ErrNotEmpty)
	case name == "." || name == "..":
		return fmt.Errorf("unlink %q: %w", name, ErrIsDir)
	}
	if err := checkName(name); err != nil {
		return err
	}
	// Linux's order: the name, then the sticky rule, then the type.
	var target Ino
	var targetDir bool
	err := j.db.View(func(txn *metalog.Txn) error {
		ino, t, ok, err := j.child(txn, parent, name)
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("remove %q: %w", name, ErrNotFound)
		}
		p, err := j.getInode(txn, parent)
		if err != nil {
			return err
		}
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		switch {
		case stickyDenied(c, p, n):
			return fmt.Errorf("remove %q from a sticky directory: %w", name, ErrPermission)
		case isDir && t != TypeDir:
			return fmt.Errorf("rmdir %q: %w", name, ErrNotDir)
		case !isDir && t == TypeDir:
			return fmt.Errorf("unlink %q: %w", name, ErrIsDir)
		}
		target, targetDir = ino, t == TypeDir
		return nil
	})
	if err != nil {
		return err
	}
	if targetDir {
		if err := j.ensureDir(ctx, target); err != nil { // to see that it is empty
			return err
		}
	}
	now := j.cfg.Clock()
	var dropped []*inode
	err = j.update(func(txn *metalog.Txn) error {
		return j.removeEntry(txn, parent, name, target, isDir, now, &dropped)
	})
	if err == nil {
		j.forget(dropped)
	}
	return err
}

// removeEntry removes parent/name, inode ino (an empty directory if isDir),
// in txn: the parent's link count and times, the name, and the inode if
// that was its last name.
func (j *Journal) removeEntry(txn *metalog.Txn, parent Ino, name string, ino Ino, isDir bool, now int64, dropped *[]*inode) error {
	p, err := j.getInode(txn, parent)
	if err != nil {
		return err
	}
	n, err := j.getInode(txn, ino)
	if err != nil {
		return err
	}
	if isDir {
		if empty, err := j.isEmpty(txn, ino); err != nil {
			return err
		} else if !empty {
			return fmt.Errorf("rmdir %q: %w", name, ErrNotEmpty)
		}
		p.Nlink--
	}
	p.Mtime, p.Ctime = now, now
	if err := j.putInode(txn, p); err != nil {
		return err
	}
	if err := j.dropName(txn, parent, name, n, now, dropped); err != nil {
		return err
	}
	return j.markDirUp(txn, parent)
}

// dropName removes the dentry parent/name of n and one link of n, deleting n
// when no link is left. Deleted inodes are appended to dropped so their
// staging files can be removed once the transaction committed.
func (j *Journal) dropName(txn *metalog.Txn, parent Ino, name string, n *inode, now int64, dropped *[]*inode) error {
	if err := txn.Delete(dentryKey(j.m.Epoch, parent, name)); err != nil {
		return err
	}
	if n.Type != TypeDir {
		if err := txn.Delete(linkKey(j.m.Epoch, n.Ino, parent, name)); err != nil {
			return err
		}
	}
	n.Ctime = now
	if n.Type == TypeDir || n.Nlink <= 1 {
		return j.deleteInode(txn, n, dropped)
	}
	n.Nlink--
	if err := j.putInode(txn, n); err != nil {
		return err
	}
	return j.markDirty(txn, n)
}

// deleteInode removes an inode that lost its last name, unless it is an
// open file (handle.go: it becomes an orphan).
func (j *Journal) deleteInode(txn *metalog.Txn, n *inode, dropped *[]*inode) error {
	if kept, err := j.orphan(txn, n); kept || err != nil {
		return err
	}
	return j.reallyDeleteInode(txn, n, dropped)
}

// reallyDeleteInode removes an inode with its xattrs. Its dirty marker
// stays: a commit only visits inodes that have a name, and deletes the
// markers it consumed.
func (j *Journal) reallyDeleteInode(txn *metalog.Txn, n *inode, dropped *[]*inode) error {
	if err := j.delInode(txn, n.Ino); err != nil {
		return err
	}
	if n.HasXattrs {
		if err := j.deletePrefix(txn, xattrPrefix(j.m.Epoch, n.Ino)); err != nil {
			return err
		}
	}
	if n.Type == TypeRegular {
		j.m.Bytes -= min(j.m.Bytes, n.Size)
	}
	if c := j.m.count(n.Type); *c > 0 {
		*c--
	}
	*dropped = append(*dropped, n)
	return nil
}

func (j *Journal) deletePrefix(txn *metalog.Txn, prefix []byte) error {
	it := txn.NewIterator(metalog.IteratorOptions{Prefix: prefix})
	var keys [][]byte
	for it.Rewind(); it.Valid(); it.Next() {
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	it.Close()
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// isEmpty reports whether the loaded directory ino has no entries.
func (j *Journal) isEmpty(txn *metalog.Txn, ino Ino) (bool, error) {
	it := txn.NewIterator(metalog.IteratorOptions{Prefix: dentryPrefix(j.m.Epoch, ino), PrefetchValues: false})
	defer it.Close()
	it.Rewind()
	return !it.Valid(), nil
}

// ReadDir returns a directory's entries sorted bytewise by name, without
// "." and "..".
func (j *Journal) ReadDir(ctx context.Context, ino Ino) ([]DirEntry, error) {
	if err := j.lock(); err != nil {
		return nil, err
	}
	defer j.mu.Unlock()
	tree, err := j.ensureDirTree(ctx, ino)
	if err != nil {
		return nil, err
	}
	if tree != nil { // loaded just now: its entries are the tree's
		out := make([]DirEntry, len(tree.Entries))
		for i := range tree.Entries {
			e := &tree.Entries[i]
			out[i] = DirEntry{Name: e.Name, Ino: Ino(e.Ino), Type: e.Type}
		}
		return out, nil
	}
	return j.dentries(ino, 0)
}

// dentries returns up to max (0: all) entries of the loaded directory dir,
// sorted bytewise by name.
func (j *Journal) dentries(dir Ino, max int) ([]DirEntry, error) {
	var out []DirEntry
	err := j.db.View(func(txn *metalog.Txn) error {
		prefix := dentryPrefix(j.m.Epoch, dir)
		it := txn.NewIterator(metalog.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Rewind(); it.Valid() && (max == 0 || len(out) < max); it.Next() {
			item := it.Item()
			name := string(item.Key()[len(prefix):])
			err := item.Value(func(v []byte) error {
				child, t, ok := parseDentry(v)
				if !ok {
					return fmt.Errorf("%w: bad directory entry %q in %d", ErrIO, name, dir)
				}
				out = append(out, DirEntry{Name: name, Ino: child, Type: t})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}
