package journal

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

func checkXattrName(name string) error {
	switch {
	case name == "" || strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("xattr name %q: %w", name, ErrInvalid)
	case len(name) > XattrNameMax:
		return fmt.Errorf("xattr name of %d bytes: %w", len(name), ErrRange)
	case strings.HasPrefix(name, "user."), strings.HasPrefix(name, "trusted."), strings.HasPrefix(name, "security."):
		return nil
	}
	return fmt.Errorf("xattr namespace of %q: %w", name, ErrNotSupported)
}

// GetXattr returns the value of an extended attribute, or ErrNoData.
func (j *Journal) GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error) {
	if err := j.lock(); err != nil {
		return nil, err
	}
	defer j.mu.Unlock()
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	var val []byte
	err := j.db.View(func(txn *badger.Txn) error {
		if _, err := j.getInode(txn, ino); err != nil {
			return err
		}
		item, err := txn.Get(xattrKey(j.m.Epoch, ino, name))
		if errors.Is(err, badger.ErrKeyNotFound) {
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
	err := j.db.View(func(txn *badger.Txn) error {
		if _, err := j.getInode(txn, ino); err != nil {
			return err
		}
		names = j.xattrNames(txn, ino)
		return nil
	})
	return names, err
}

func (j *Journal) xattrNames(txn *badger.Txn, ino Ino) []string {
	prefix := xattrPrefix(j.m.Epoch, ino)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var names []string
	for it.Rewind(); it.Valid(); it.Next() {
		names = append(names, string(it.Item().Key()[len(prefix):]))
	}
	return names
}

// SetXattr sets an extended attribute, honouring XattrCreate/XattrReplace.
func (j *Journal) SetXattr(ctx context.Context, c Caller, ino Ino, name string, value []byte, flags XattrFlags) error {
	if err := j.lock(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	if err := checkXattrName(name); err != nil {
		return err
	}
	if flags&^(XattrCreate|XattrReplace) != 0 || flags == XattrCreate|XattrReplace {
		return fmt.Errorf("setxattr flags %#x: %w", flags, ErrInvalid)
	}
	if len(value) > XattrSizeMax {
		return fmt.Errorf("xattr value of %d bytes: %w", len(value), ErrTooBig)
	}
	now := j.cfg.Clock()
	return j.update(func(txn *badger.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
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
	if err := j.lock(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	if err := checkXattrName(name); err != nil {
		return err
	}
	now := j.cfg.Clock()
	return j.update(func(txn *badger.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		key := xattrKey(j.m.Epoch, ino, name)
		if _, err := txn.Get(key); errors.Is(err, badger.ErrKeyNotFound) {
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
