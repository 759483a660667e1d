package model

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cairnfs/cairn/journal"
)

// DirSize is the Size a directory reports. Linux filesystems disagree
// (tmpfs: 20 bytes per entry, ext4: its block count); the journal reports
// this constant.
const DirSize = 0

// Model is an in-memory reference filesystem with the journal's method set.
// It is not safe for concurrent use.
type Model struct {
	clock  func() int64
	next   journal.Ino
	inodes map[journal.Ino]*inode
}

type inode struct {
	attr journal.Attr // Nlink is kept for non-directories only; see (*Model).attr

	parent  journal.Ino            // directories: the directory holding it (the root: itself)
	entries map[string]journal.Ino // directories
	target  string                 // symlinks
	data    *fileData              // regular files
	xattrs  map[string][]byte
}

// New returns a model holding only the root directory: RootIno, mode 0755,
// owned by 0:0, with all times set to clock(). Inodes created later are
// numbered firstIno, firstIno+1, ... in the order of successful creations.
func New(clock func() int64, firstIno journal.Ino) *Model {
	if firstIno <= journal.RootIno {
		panic(fmt.Sprintf("model: first inode number %d must be above the root's", firstIno))
	}
	now := clock()
	root := &inode{
		attr: journal.Attr{
			Ino: journal.RootIno, Type: journal.TypeDir, Mode: 0o755,
			Size: DirSize, Atime: now, Mtime: now, Ctime: now,
		},
		parent:  journal.RootIno,
		entries: map[string]journal.Ino{},
		xattrs:  map[string][]byte{},
	}
	return &Model{
		clock:  clock,
		next:   firstIno,
		inodes: map[journal.Ino]*inode{journal.RootIno: root},
	}
}

// Clone returns a deep copy of m sharing m's clock.
func (m *Model) Clone() *Model {
	c := &Model{clock: m.clock, next: m.next, inodes: make(map[journal.Ino]*inode, len(m.inodes))}
	for ino, n := range m.inodes {
		cp := *n
		cp.entries = maps.Clone(n.entries)
		cp.data = n.data.clone()
		cp.xattrs = make(map[string][]byte, len(n.xattrs))
		for k, v := range n.xattrs {
			cp.xattrs[k] = slices.Clone(v)
		}
		c.inodes[ino] = &cp
	}
	return c
}

// NextIno returns the number the next created inode gets.
func (m *Model) NextIno() journal.Ino { return m.next }

// SetNextIno sets the number the next created inode gets. A harness uses
// it to mirror the journal's high-water mark after a rollback.
func (m *Model) SetNextIno(ino journal.Ino) { m.next = ino }

// Inos returns the numbers of every live inode, sorted.
func (m *Model) Inos() []journal.Ino {
	return slices.Sorted(maps.Keys(m.inodes))
}

// Fsync checks that ino exists; the model has nothing to flush.
func (m *Model) Fsync(ctx context.Context, ino journal.Ino, dataOnly bool) error {
	_, err := m.get(ino)
	return err
}

// StatFs reports loose figures: the model has no capacity limit.
func (m *Model) StatFs(ctx context.Context) (journal.StatFs, error) {
	const blocks = 1 << 30
	var used uint64
	for _, n := range m.inodes {
		used += (n.attr.Size + 4095) / 4096
	}
	return journal.StatFs{
		Blocks: blocks, Bfree: blocks - used, Bavail: blocks - used,
		Files: 1 << 30, Ffree: 1<<30 - uint64(len(m.inodes)),
		Bsize: 4096, NameLen: journal.NameMax,
	}, nil
}

// get returns a live inode or ErrNotFound.
func (m *Model) get(ino journal.Ino) (*inode, error) {
	n, ok := m.inodes[ino]
	if !ok {
		return nil, fmt.Errorf("inode %d: %w", ino, journal.ErrNotFound)
	}
	return n, nil
}

// dir returns a live directory, ErrNotFound or ErrNotDir.
func (m *Model) dir(ino journal.Ino) (*inode, error) {
	n, err := m.get(ino)
	if err != nil {
		return nil, err
	}
	if n.attr.Type != journal.TypeDir {
		return nil, fmt.Errorf("inode %d: %w", ino, journal.ErrNotDir)
	}
	return n, nil
}

// attr returns n's attributes with a directory's link count computed:
// 2 + its subdirectories.
func (m *Model) attr(n *inode) journal.Attr {
	a := n.attr
	if a.Type == journal.TypeDir {
		a.Nlink = 2
		for _, child := range n.entries {
			if m.inodes[child].attr.Type == journal.TypeDir {
				a.Nlink++
			}
		}
	}
	return a
}

// checkName validates the syntax of a name that is not "." or "..":
// empty -> ErrNotFound (what an empty path gives), '/' or NUL ->
// ErrInvalid, over NameMax bytes -> ErrNameTooLong.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name: %w", journal.ErrNotFound)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("name %q: %w", name, journal.ErrInvalid)
	case len(name) > journal.NameMax:
		return fmt.Errorf("name of %d bytes: %w", len(name), journal.ErrNameTooLong)
	}
	return nil
}

func isDot(name string) bool { return name == "." || name == ".." }

// touchDir records a change of a directory's entries.
func touchDir(d *inode, now int64) {
	d.attr.Mtime, d.attr.Ctime = now, now
}

// newInode allocates the next inode number for a new inode of type typ in
// directory parent, created by c with permission bits mode. Ownership
// follows Linux's inode_init_owner: the caller's uid, and the caller's gid
// unless parent is setgid, in which case the parent's gid (and a new
// directory inherits the setgid bit).
func (m *Model) newInode(c journal.Caller, parent *inode, typ journal.Type, mode uint32, now int64) *inode {
	gid := c.GID
	if parent.attr.Mode&journal.ModeSetgid != 0 {
		gid = parent.attr.GID
		if typ == journal.TypeDir {
			mode |= journal.ModeSetgid
		} else if mode&(journal.ModeSetgid|0o010) == journal.ModeSetgid|0o010 &&
			!c.Privileged() && !c.InGroup(gid) {
			// mode_strip_sgid: a non-member may not create a setgid
			// file in the directory's group.
			mode &^= journal.ModeSetgid
		}
	}
	n := &inode{
		attr: journal.Attr{
			Ino: m.next, Type: typ, Mode: mode & journal.ModePerm,
			UID: c.UID, GID: gid, Nlink: 1,
			Atime: now, Mtime: now, Ctime: now,
		},
		xattrs: map[string][]byte{},
	}
	switch typ {
	case journal.TypeDir:
		n.entries = map[string]journal.Ino{}
		n.parent = parent.attr.Ino
		n.attr.Size = DirSize
	case journal.TypeRegular:
		n.data = &fileData{}
	}
	m.inodes[n.attr.Ino] = n
	m.next++
	return n
}

// dropLink removes one name of a non-directory: the inode goes away with
// its last name, otherwise its ctime changes.
func (m *Model) dropLink(n *inode, now int64) {
	n.attr.Nlink--
	if n.attr.Nlink == 0 {
		delete(m.inodes, n.attr.Ino)
		return
	}
	n.attr.Ctime = now
}

// remove drops the entry name of directory d naming child: a directory
// goes away, a non-directory loses a link.
func (m *Model) remove(d *inode, name string, child *inode, now int64) {
	delete(d.entries, name)
	if child.attr.Type == journal.TypeDir {
		delete(m.inodes, child.attr.Ino)
		return
	}
	m.dropLink(child, now)
}

// stickyDenied reports whether c may not remove or rename victim from the
// sticky directory d: only root, d's owner and victim's owner may.
func stickyDenied(c journal.Caller, d, victim *inode) bool {
	return d.attr.Mode&journal.ModeSticky != 0 && !c.Privileged() &&
		c.UID != d.attr.UID && c.UID != victim.attr.UID
}

// killPriv clears the setuid and setgid bits of a regular file the way
// Linux does when c writes to or truncates it (file_remove_privs): nothing
// for a privileged caller; otherwise setuid always, and setgid when group
// execute is set or c is not in the file's group.
func killPriv(c journal.Caller, n *inode) {
	if n.attr.Type != journal.TypeRegular || c.Privileged() {
		return
	}
	n.attr.Mode &^= journal.ModeSetuid
	if n.attr.Mode&0o010 != 0 || !c.InGroup(n.attr.GID) {
		n.attr.Mode &^= journal.ModeSetgid
	}
}
