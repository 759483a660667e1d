package journal

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

// checkXattrName applies Linux's limits on an xattr name's length.
func checkXattrName(name string) error {
	if name == "" || len(name) > XattrNameMax {
		return fmt.Errorf("xattr name of %d bytes: %w", len(name), ErrRange)
	}
	return nil
}

// xattrAccess applies Linux's namespace rules to reading (c == nil) or
// changing an xattr of n: user.* only on regular files and directories
// (and on a sticky directory only by its owner or root), trusted.* and
// security.* changed only by root, a bare namespace prefix invalid, other
// namespaces unsupported.
func xattrAccess(c *Caller, n *inode, name string) error {
	write := c != nil
	if strings.HasPrefix(name, "user.") {
		if n.Type != TypeRegular && n.Type != TypeDir {
			if write {
				return fmt.Errorf("user xattr on %v %d: %w", n.Type, n.Ino, ErrPermission)
			}
			return fmt.Errorf("user xattr on %v %d: %w", n.Type, n.Ino, ErrNoData)
		}
		if write && n.Type == TypeDir && n.Mode&ModeSticky != 0 && !c.Privileged() && c.UID != n.UID {
			return fmt.Errorf("user xattr on sticky directory %d: %w", n.Ino, ErrPermission)
		}
	}
	if write && (strings.HasPrefix(name, "trusted.") || strings.HasPrefix(name, "security.")) && !c.Privileged() {
		return fmt.Errorf("xattr %q by uid %d: %w", name, c.UID, ErrPermission)
	}
	return xattrNamespace(name)
}

// xattrNamespace checks that name is in a namespace the journal stores
// (user., trusted., security.) and names more than it.
func xattrNamespace(name string) error {
	for _, ns := range []string{"user.", "trusted.", "security."} {
		if strings.HasPrefix(name, ns) {
			if len(name) == len(ns) {
				return fmt.Errorf("xattr name %q: %w", name, ErrInvalid)
			}
			return nil
		}
	}
	return fmt.Errorf("xattr namespace of %q: %w", name, ErrNotSupported)
}

// GetXattr returns the value of an extended attribute, or ErrNoData. A
// valid name of an inode known to have no xattrs is answered without the
// journal's lock or a transaction (xattrFree).
func (j *Journal) GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	if xattrNamespace(name) == nil && j.cache.noXattrs.has(ino) {
		return nil, fmt.Errorf("xattr %q of inode %d: %w", name, ino, ErrNoData)
	}
	if err := j.lock(); err != nil {
		return nil, err
	}
	defer j.mu.Unlock()
	var val []byte
	err := j.db.View(func(txn *metalog.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		if err := xattrAccess(nil, n, name); err != nil {
			return err
		}
		item, err := txn.Get(xattrKey(j.m.Epoch, ino, name))
		if errors.Is(err, metalog.ErrKeyNotFound) {
			return fmt.Errorf("xattr %q of inode %d: %w", name, ino, ErrNoData)
		}
		if err != nil {
			return err
		}
		val, err = item.ValueCopy(nil)
		if val == nil {
			val = []byte{}
		}
		return err
	})
	return val, err
}

// ListXattr returns an inode's xattr names, sorted.
func (j *Journal) ListXattr(ctx context.Context, ino Ino) ([]string, error) {
	if err := j.lock(); err != nil {
		return nil, err
	}
	defer j.mu.Unlock()
	var names []string
	err := j.db.View(func(txn *metalog.Txn) error {
		if _, err := j.getInode(txn, ino); err != nil {
			return err
		}
		names = j.xattrNames(txn, ino)
		return nil
	})
	return names, err
}

func (j *Journal) xattrNames(txn *metalog.Txn, ino Ino) []string {
	prefix := xattrPrefix(j.m.Epoch, ino)
	it := txn.NewIterator(metalog.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var names []string
	for it.Rewind(); it.Valid(); it.Next() {
		names = append(names, string(it.Item().Key()[len(prefix):]))
	}
	return names
}

// SetXattr sets an extended attribute, honouring XattrCreate/XattrReplace.
func (j *Journal) SetXattr(ctx context.Context, c Caller, ino Ino, name string, value []byte, flags XattrFlags) error {
	if err := j.lockW(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	if flags&^(XattrCreate|XattrReplace) != 0 {
		return fmt.Errorf("setxattr flags %#x: %w", flags, ErrInvalid)
	}
	if err := checkXattrName(name); err != nil {
		return err
	}
	if len(value) > XattrSizeMax {
		return fmt.Errorf("xattr value of %d bytes: %w", len(value), ErrTooBig)
	}
	now := j.cfg.Clock()
	return j.update(func(txn *metalog.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		if err := xattrAccess(&c, n, name); err != nil {
			return err
		}
		names := j.xattrNames(txn, ino)
		exists := false
		listLen := 0
		for _, x := range names {
			exists = exists || x == name
			listLen += len(x) + 1
		}
		switch {
		case exists && flags&XattrCreate != 0:
			return fmt.Errorf("xattr %q: %w", name, ErrExists)
		case !exists && flags&XattrReplace != 0:
			return fmt.Errorf("xattr %q: %w", name, ErrNoData)
		case !exists && listLen+len(name)+1 > XattrListMax:
			return fmt.Errorf("xattr names of inode %d: %w", ino, ErrNoXattrSpace)
		}
		if err := txn.Set(xattrKey(j.m.Epoch, ino, name), append([]byte(nil), value...)); err != nil {
			return err
		}
		n.HasXattrs = true
		n.Ctime = now
		if err := j.putInode(txn, n); err != nil {
			return err
		}
		return j.markDirty(txn, n)
	})
}

// RemoveXattr removes an extended attribute, or fails with ErrNoData.
func (j *Journal) RemoveXattr(ctx context.Context, c Caller, ino Ino, name string) error {
	if err := j.lockW(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	if err := checkXattrName(name); err != nil {
		return err
	}
	now := j.cfg.Clock()
	return j.update(func(txn *metalog.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		if err := xattrAccess(&c, n, name); err != nil {
			return err
		}
		key := xattrKey(j.m.Epoch, ino, name)
		if _, err := txn.Get(key); errors.Is(err, metalog.ErrKeyNotFound) {
			return fmt.Errorf("xattr %q of inode %d: %w", name, ino, ErrNoData)
		} else if err != nil {
			return err
		}
		if err := txn.Delete(key); err != nil {
			return err
		}
		n.Ctime = now
		if err := j.putInode(txn, n); err != nil {
			return err
		}
		return j.markDirty(txn, n)
	})
}
