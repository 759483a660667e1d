//go:build linux

package model

import (
	"bytes"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/journal"
)

// Xattr operations of the differential test.

func (d *differ) pickXattrName() string {
	return pick(d, "user.a", "user.b", "user.a", "user.b", "user.c", "trusted.t", "security.s",
		"user.", "foo.bar", "", "user."+strings.Repeat("x", journal.XattrNameMax-4))
}

// xattrNeedsWrite reports whether the kernel checks write permission
// before anything that fails an xattr write of name on n.
func xattrNeedsWrite(c journal.Caller, n *inode, name string) bool {
	switch {
	case name == "" || len(name) > journal.XattrNameMax:
		return false
	case strings.HasPrefix(name, "trusted."), strings.HasPrefix(name, "security."):
		return false
	case strings.HasPrefix(name, "user."):
		t := n.attr.Type
		if t != journal.TypeRegular && t != journal.TypeDir {
			return false
		}
		return t != journal.TypeDir || n.attr.Mode&journal.ModeSticky == 0 || c.UID == n.attr.UID
	}
	return true
}

func (d *differ) canWriteXattr(c journal.Caller, e env, ino journal.Ino, name string) bool {
	if c.Privileged() {
		return true
	}
	if !d.searchable(c, d.locOf(e, ino).dir) {
		return false
	}
	n, ok := d.m.inodes[ino]
	return !ok || !xattrNeedsWrite(c, n, name) || permits(c, n, unix.W_OK)
}

func (d *differ) opSetXattr(c journal.Caller, e env) bool {
	ino, rel := d.pickInoWhere(e, 4, anyInode)
	name := d.pickXattrName()
	value := pick(d, d.randBytes(d.rng.IntN(100)), d.randBytes(d.rng.IntN(100)), []byte{},
		d.randBytes(journal.XattrSizeMax), d.randBytes(journal.XattrSizeMax+1))
	if len(value) >= journal.XattrSizeMax && d.rng.IntN(4) != 0 {
		value = value[:10]
	}
	flags := pick(d, journal.XattrFlags(0), 0, journal.XattrCreate, journal.XattrReplace)
	if d.rng.IntN(30) == 0 {
		flags = pick(d, journal.XattrCreate|journal.XattrReplace, 4)
	}
	if !d.canWriteXattr(c, e, ino, name) {
		return false
	}
	op := d.record(c, "setxattr %s %q %d bytes flags %d", rel, trunc(name), len(value), flags)
	merr := d.m.SetXattr(d.t.Context(), c, ino, name, value, flags)
	kerr := asCaller(c, func() error { return unix.Lsetxattr(d.abs(rel), name, value, int(flags)) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opRemoveXattr(c journal.Caller, e env) bool {
	ino, rel := d.pickInoWhere(e, 4, anyInode)
	name := d.pickXattrName()
	if !d.canWriteXattr(c, e, ino, name) {
		return false
	}
	op := d.record(c, "removexattr %s %q", rel, trunc(name))
	merr := d.m.RemoveXattr(d.t.Context(), c, ino, name)
	kerr := asCaller(c, func() error { return unix.Lremovexattr(d.abs(rel), name) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opGetXattr(c journal.Caller, e env) bool {
	ino, rel := d.pickInoWhere(e, 4, anyInode)
	name := d.pickXattrName()
	op := d.record(c, "getxattr %s %q", rel, trunc(name))
	mv, merr := d.m.GetXattr(d.t.Context(), ino, name)
	buf := make([]byte, 1<<17)
	kn, kerr := unix.Lgetxattr(d.abs(rel), name, buf)
	d.compareErr(op, merr, kerr)
	if merr == nil && !bytes.Equal(mv, buf[:kn]) {
		d.fail("%s: model %d bytes, Linux %d", op, len(mv), kn)
	}
	return true
}
