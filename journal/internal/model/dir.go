package model

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cairnfs/cairn/journal"
)

// Lookup returns the attributes of the inode name in parent. "." is parent
// itself and ".." its parent (the root's is the root).
func (m *Model) Lookup(ctx context.Context, parent journal.Ino, name string) (journal.Attr, error) {
	d, err := m.dir(parent)
	if err != nil {
		return journal.Attr{}, err
	}
	switch name {
	case ".":
		return m.attr(d), nil
	case "..":
		return m.attr(m.inodes[d.parent]), nil
	}
	if err := checkName(name); err != nil {
		return journal.Attr{}, err
	}
	ino, ok := d.entries[name]
	if !ok {
		return journal.Attr{}, fmt.Errorf("lookup %q in %d: %w", name, parent, journal.ErrNotFound)
	}
	return m.attr(m.inodes[ino]), nil
}

// prepareCreate checks that name can be created in parent: parent is a
// directory, name is not "." or ".." (ErrExists, as mkdir("d/.") gives),
// valid, and absent.
func (m *Model) prepareCreate(parent journal.Ino, name string) (*inode, error) {
	d, err := m.dir(parent)
	if err != nil {
		return nil, err
	}
	if isDot(name) {
		return nil, fmt.Errorf("create %q: %w", name, journal.ErrExists)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if _, ok := d.entries[name]; ok {
		return nil, fmt.Errorf("create %q in %d: %w", name, parent, journal.ErrExists)
	}
	return d, nil
}

// create adds a new inode named name to d.
func (m *Model) create(c journal.Caller, d *inode, name string, typ journal.Type, mode uint32) *inode {
	now := m.clock()
	n := m.newInode(c, d, typ, mode, now)
	d.entries[name] = n.attr.Ino
	touchDir(d, now)
	return n
}

// Create creates the regular file name in parent with permission bits mode
// (the kernel has applied the umask).
func (m *Model) Create(ctx context.Context, c journal.Caller, parent journal.Ino, name string, mode uint32) (journal.Attr, error) {
	d, err := m.prepareCreate(parent, name)
	if err != nil {
		return journal.Attr{}, err
	}
	return m.attr(m.create(c, d, name, journal.TypeRegular, mode)), nil
}

// Mknod creates a FIFO, socket, device node or regular file. rdev is kept
// for device nodes only. Like mknod(2), a directory type gives
// ErrPermission and a symlink or unknown type ErrInvalid, before anything
// else is checked. The model does not check CAP_MKNOD: the kernel does.
func (m *Model) Mknod(ctx context.Context, c journal.Caller, parent journal.Ino, name string, typ journal.Type, mode uint32, rdev uint64) (journal.Attr, error) {
	switch typ {
	case journal.TypeRegular, journal.TypeFIFO, journal.TypeSocket:
		rdev = 0
	case journal.TypeCharDev, journal.TypeBlockDev:
	case journal.TypeDir:
		return journal.Attr{}, fmt.Errorf("mknod a directory: %w", journal.ErrPermission)
	default:
		return journal.Attr{}, fmt.Errorf("mknod type %v: %w", typ, journal.ErrInvalid)
	}
	d, err := m.prepareCreate(parent, name)
	if err != nil {
		return journal.Attr{}, err
	}
	n := m.create(c, d, name, typ, mode)
	n.attr.Rdev = rdev
	return m.attr(n), nil
}

// Mkdir creates the directory name in parent. Like mkdir(2) it keeps only
// the permission and sticky bits of mode; the setgid bit comes from a
// setgid parent.
func (m *Model) Mkdir(ctx context.Context, c journal.Caller, parent journal.Ino, name string, mode uint32) (journal.Attr, error) {
	d, err := m.prepareCreate(parent, name)
	if err != nil {
		return journal.Attr{}, err
	}
	if m.attr(d).Nlink >= journal.LinkMax {
		return journal.Attr{}, fmt.Errorf("mkdir %q in %d: %w", name, parent, journal.ErrTooManyLinks)
	}
	return m.attr(m.create(c, d, name, journal.TypeDir, mode&(0o777|journal.ModeSticky))), nil
}

// Symlink creates the symlink name in parent pointing to target (mode
// 0777). An empty target gives ErrNotFound and one over SymlinkMax bytes
// ErrNameTooLong, checked first as symlink(2) does.
func (m *Model) Symlink(ctx context.Context, c journal.Caller, parent journal.Ino, name, target string) (journal.Attr, error) {
	switch {
	case target == "":
		return journal.Attr{}, fmt.Errorf("empty symlink target: %w", journal.ErrNotFound)
	case len(target) > journal.SymlinkMax:
		return journal.Attr{}, fmt.Errorf("symlink target of %d bytes: %w", len(target), journal.ErrNameTooLong)
	case strings.IndexByte(target, 0) >= 0:
		return journal.Attr{}, fmt.Errorf("symlink target with a NUL: %w", journal.ErrInvalid)
	}
	d, err := m.prepareCreate(parent, name)
	if err != nil {
		return journal.Attr{}, err
	}
	n := m.create(c, d, name, journal.TypeSymlink, 0o777)
	n.target = target
	n.attr.Size = uint64(len(target))
	return m.attr(n), nil
}

// Readlink returns a symlink's target; ErrInvalid for other inodes.
func (m *Model) Readlink(ctx context.Context, ino journal.Ino) (string, error) {
	n, err := m.get(ino)
	if err != nil {
		return "", err
	}
	if n.attr.Type != journal.TypeSymlink {
		return "", fmt.Errorf("readlink %d: %w", ino, journal.ErrInvalid)
	}
	return n.target, nil
}

// Link adds the name newName in newParent for ino: ErrPermission for a
// directory (after the name checks, as link(2) orders them),
// ErrTooManyLinks at LinkMax.
func (m *Model) Link(ctx context.Context, c journal.Caller, ino journal.Ino, newParent journal.Ino, newName string) (journal.Attr, error) {
	n, err := m.get(ino)
	if err != nil {
		return journal.Attr{}, err
	}
	d, err := m.prepareCreate(newParent, newName)
	if err != nil {
		return journal.Attr{}, err
	}
	if n.attr.Type == journal.TypeDir {
		return journal.Attr{}, fmt.Errorf("link directory %d: %w", ino, journal.ErrPermission)
	}
	if n.attr.Nlink >= journal.LinkMax {
		return journal.Attr{}, fmt.Errorf("link %d: %w", ino, journal.ErrTooManyLinks)
	}
	now := m.clock()
	n.attr.Nlink++
	n.attr.Ctime = now
	d.entries[newName] = ino
	touchDir(d, now)
	return m.attr(n), nil
}

// Unlink removes the non-directory name from parent. "." and ".." give
// ErrIsDir, a sticky-directory violation ErrPermission (checked before the
// type), a directory ErrIsDir (Linux's errno, where POSIX says EPERM).
func (m *Model) Unlink(ctx context.Context, c journal.Caller, parent journal.Ino, name string) error {
	d, err := m.dir(parent)
	if err != nil {
		return err
	}
	if isDot(name) {
		return fmt.Errorf("unlink %q: %w", name, journal.ErrIsDir)
	}
	if err := checkName(name); err != nil {
		return err
	}
	ino, ok := d.entries[name]
	if !ok {
		return fmt.Errorf("unlink %q in %d: %w", name, parent, journal.ErrNotFound)
	}
	n := m.inodes[ino]
	if stickyDenied(c, d, n) {
		return fmt.Errorf("unlink %q in sticky directory %d: %w", name, parent, journal.ErrPermission)
	}
	if n.attr.Type == journal.TypeDir {
		return fmt.Errorf("unlink %q in %d: %w", name, parent, journal.ErrIsDir)
	}
	now := m.clock()
	m.remove(d, name, n, now)
	touchDir(d, now)
	return nil
}

// Rmdir removes the empty directory name from parent. As rmdir(2): "."
// gives ErrInvalid, ".." ErrNotEmpty; then ErrNotFound, the sticky check
// (ErrPermission), ErrNotDir, ErrNotEmpty.
func (m *Model) Rmdir(ctx context.Context, c journal.Caller, parent journal.Ino, name string) error {
	d, err := m.dir(parent)
	if err != nil {
		return err
	}
	switch name {
	case ".":
		return fmt.Errorf("rmdir %q: %w", name, journal.ErrInvalid)
	case "..":
		return fmt.Errorf("rmdir %q: %w", name, journal.ErrNotEmpty)
	}
	if err := checkName(name); err != nil {
		return err
	}
	ino, ok := d.entries[name]
	if !ok {
		return fmt.Errorf("rmdir %q in %d: %w", name, parent, journal.ErrNotFound)
	}
	n := m.inodes[ino]
	if stickyDenied(c, d, n) {
		return fmt.Errorf("rmdir %q in sticky directory %d: %w", name, parent, journal.ErrPermission)
	}
	if n.attr.Type != journal.TypeDir {
		return fmt.Errorf("rmdir %q in %d: %w", name, parent, journal.ErrNotDir)
	}
	if len(n.entries) > 0 {
		return fmt.Errorf("rmdir %q in %d: %w", name, parent, journal.ErrNotEmpty)
	}
	now := m.clock()
	m.remove(d, name, n, now)
	touchDir(d, now)
	return nil
}

// ReadDir returns a directory's entries sorted bytewise by name, without
// "." and "..".
func (m *Model) ReadDir(ctx context.Context, ino journal.Ino) ([]journal.DirEntry, error) {
	d, err := m.dir(ino)
	if err != nil {
		return nil, err
	}
	out := make([]journal.DirEntry, 0, len(d.entries))
	for name, child := range d.entries {
		out = append(out, journal.DirEntry{Name: name, Ino: child, Type: m.inodes[child].attr.Type})
	}
	slices.SortFunc(out, func(a, b journal.DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
