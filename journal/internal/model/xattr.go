package model

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cairnfs/cairn/journal"
)

// Xattr namespaces the model accepts.
var xattrNamespaces = []string{"user.", "trusted.", "security."}

// checkXattrName validates an xattr name's syntax as the xattr syscalls
// do before looking at the inode: empty or over XattrNameMax bytes gives
// ErrRange (Linux's errno for both).
func checkXattrName(name string) error {
	if name == "" || len(name) > journal.XattrNameMax {
		return fmt.Errorf("xattr name of %d bytes: %w", len(name), journal.ErrRange)
	}
	return nil
}

// xattrAccess applies the VFS's xattr_permission rules that are not access
// permission checks, then the namespace lookup:
//
//   - "user.*" exists only on regular files and directories: on other
//     inodes writes give ErrPermission (even for root) and reads ErrNoData;
//   - writing "user.*" on a sticky directory takes its owner or root
//     (ErrPermission);
//   - writing "trusted.*" or "security.*" takes root (ErrPermission:
//     CAP_SYS_ADMIN); the read side of the trusted rule (ErrNoData for
//     unprivileged readers) is the kernel's, as reads carry no caller;
//   - then an unknown namespace gives ErrNotSupported, a namespace prefix
//     alone ("user.") ErrInvalid.
//
// c is nil for reads.
func xattrAccess(c *journal.Caller, n *inode, name string) error {
	write := c != nil
	if strings.HasPrefix(name, "user.") {
		if t := n.attr.Type; t != journal.TypeRegular && t != journal.TypeDir {
			if write {
				return fmt.Errorf("user xattr on %v %d: %w", t, n.attr.Ino, journal.ErrPermission)
			}
			return fmt.Errorf("user xattr on %v %d: %w", t, n.attr.Ino, journal.ErrNoData)
		}
		if write && n.attr.Type == journal.TypeDir && n.attr.Mode&journal.ModeSticky != 0 &&
			!c.Privileged() && c.UID != n.attr.UID {
			return fmt.Errorf("user xattr on sticky directory %d: %w", n.attr.Ino, journal.ErrPermission)
		}
	}
	if write && (strings.HasPrefix(name, "trusted.") || strings.HasPrefix(name, "security.")) && !c.Privileged() {
		return fmt.Errorf("xattr %q by uid %d: %w", name, c.UID, journal.ErrPermission)
	}
	for _, ns := range xattrNamespaces {
		if strings.HasPrefix(name, ns) {
			if len(name) == len(ns) {
				return fmt.Errorf("xattr name %q: %w", name, journal.ErrInvalid)
			}
			return nil
		}
	}
	return fmt.Errorf("xattr name %q: %w", name, journal.ErrNotSupported)
}

// GetXattr returns the value of an xattr, ErrNoData when absent.
func (m *Model) GetXattr(ctx context.Context, ino journal.Ino, name string) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	n, err := m.get(ino)
	if err != nil {
		return nil, err
	}
	if err := xattrAccess(nil, n, name); err != nil {
		return nil, err
	}
	v, ok := n.xattrs[name]
	if !ok {
		return nil, fmt.Errorf("xattr %q of %d: %w", name, ino, journal.ErrNoData)
	}
	return slices.Clone(v), nil
}

// SetXattr sets an xattr, checking in setxattr(2)'s order: flags other
// than CREATE and REPLACE ErrInvalid; the name ErrRange; a value over
// XattrSizeMax ErrTooBig; the inode; xattrAccess; XattrCreate on an
// existing name ErrExists, XattrReplace on a missing one ErrNoData (both
// flags: always one of these); a name list growing beyond XattrListMax
// ErrNoXattrSpace. Sets ctime, even when the value is unchanged.
func (m *Model) SetXattr(ctx context.Context, c journal.Caller, ino journal.Ino, name string, value []byte, flags journal.XattrFlags) error {
	if flags&^(journal.XattrCreate|journal.XattrReplace) != 0 {
		return fmt.Errorf("setxattr flags %#x: %w", flags, journal.ErrInvalid)
	}
	if err := checkXattrName(name); err != nil {
		return err
	}
	if len(value) > journal.XattrSizeMax {
		return fmt.Errorf("xattr value of %d bytes: %w", len(value), journal.ErrTooBig)
	}
	n, err := m.get(ino)
	if err != nil {
		return err
	}
	if err := xattrAccess(&c, n, name); err != nil {
		return err
	}
	_, exists := n.xattrs[name]
	switch {
	case exists && flags&journal.XattrCreate != 0:
		return fmt.Errorf("xattr %q of %d: %w", name, ino, journal.ErrExists)
	case !exists && flags&journal.XattrReplace != 0:
		return fmt.Errorf("xattr %q of %d: %w", name, ino, journal.ErrNoData)
	case !exists && xattrListSize(n)+len(name)+1 > journal.XattrListMax:
		return fmt.Errorf("xattr %q of %d: name list full: %w", name, ino, journal.ErrNoXattrSpace)
	}
	n.xattrs[name] = slices.Clone(value)
	if n.xattrs[name] == nil {
		n.xattrs[name] = []byte{}
	}
	n.attr.Ctime = m.clock()
	return nil
}

// xattrListSize is the length of n's NUL-separated name list.
func xattrListSize(n *inode) int {
	s := 0
	for name := range n.xattrs {
		s += len(name) + 1
	}
	return s
}

// ListXattr returns an inode's xattr names, sorted.
func (m *Model) ListXattr(ctx context.Context, ino journal.Ino) ([]string, error) {
	n, err := m.get(ino)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(n.xattrs)), nil
}

// RemoveXattr removes an xattr: ErrRange for a bad name, the xattrAccess
// rules, ErrNoData when absent. Sets ctime.
func (m *Model) RemoveXattr(ctx context.Context, c journal.Caller, ino journal.Ino, name string) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	n, err := m.get(ino)
	if err != nil {
		return err
	}
	if err := xattrAccess(&c, n, name); err != nil {
		return err
	}
	if _, ok := n.xattrs[name]; !ok {
		return fmt.Errorf("xattr %q of %d: %w", name, ino, journal.ErrNoData)
	}
	delete(n.xattrs, name)
	n.attr.Ctime = m.clock()
	return nil
}
