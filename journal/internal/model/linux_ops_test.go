//go:build linux

package model

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/journal"
)

// bogusIno is an inode number the model never allocates in a test; its
// path does not exist on the tmpfs.
const (
	bogusIno  journal.Ino = 1 << 40
	bogusPath             = "./zz-missing"
)

// env is what an operation draws its arguments from.
type env struct {
	locs map[journal.Ino]loc
	inos []journal.Ino // live inodes, sorted
}

type opFunc func(d *differ, c journal.Caller, e env) (ran bool)

type opSpec struct {
	name   string
	weight int
	unpriv bool // may run as an unprivileged caller
	f      opFunc
}

var diffOps = []opSpec{
	{"create", 10, true, (*differ).opCreate},
	{"mknod", 4, true, (*differ).opMknod},
	{"mkdir", 8, true, (*differ).opMkdir},
	{"symlink", 4, true, (*differ).opSymlink},
	{"link", 5, true, (*differ).opLink},
	{"unlink", 7, true, (*differ).opUnlink},
	{"rmdir", 5, true, (*differ).opRmdir},
	{"rename", 14, true, (*differ).opRename},
	{"write", 10, true, (*differ).opWrite},
	{"read", 4, false, (*differ).opRead},
	{"truncate", 5, true, (*differ).opTruncate},
	{"chmod", 4, true, (*differ).opChmod},
	{"chown", 4, true, (*differ).opChown},
	{"utimes", 3, true, (*differ).opUtimes},
	{"fallocate", 5, true, (*differ).opFallocate},
	{"copy_file_range", 4, true, (*differ).opCopyFileRange},
	{"lseek", 3, false, (*differ).opLseek},
	{"setxattr", 8, true, (*differ).opSetXattr},
	{"removexattr", 4, true, (*differ).opRemoveXattr},
	{"getxattr", 3, false, (*differ).opGetXattr},
	{"lookup", 4, false, (*differ).opLookup},
	{"readlink", 2, false, (*differ).opReadlink},
	{"readdir", 2, false, (*differ).opReadDir},
}

// step runs one random operation on both sides and compares.
func (d *differ) step() {
	d.t.Helper()
	total := 0
	for _, o := range diffOps {
		total += o.weight
	}
	r := d.rng.IntN(total)
	var o opSpec
	for _, o = range diffOps {
		if r < o.weight {
			break
		}
		r -= o.weight
	}
	c := journal.Root
	if o.unpriv {
		switch d.rng.IntN(10) {
		case 0, 1:
			c = user1
		case 2, 3:
			c = user2
		}
	}
	d.now += 1000
	// A timestamp update may reuse the last one handed out (multigrain
	// timestamps are fine-grained only for the inode whose ctime was
	// read; see compare). For a quarter of the operations, wait for the
	// coarse clock to pass every timestamp seen: then every update is
	// visible and compare checks time changes both ways.
	d.timed = d.rng.IntN(4) == 0
	if d.timed {
		d.waitTick()
	}
	e := env{locs: d.m.locs(), inos: d.m.Inos()}
	if !o.f(d, c, e) {
		d.skipped++
		return
	}
	d.ran++
	if !c.Privileged() {
		d.unprivileged++
	}
	d.compare()
}

// record logs an operation and its results.
func (d *differ) record(c journal.Caller, format string, args ...any) string {
	s := fmt.Sprintf("t=%d [uid %d] ", d.now/1000, c.UID) + fmt.Sprintf(format, args...)
	d.log = append(d.log, s)
	return s
}

func pick[T any](d *differ, xs ...T) T { return xs[d.rng.IntN(len(xs))] }

// pickName draws a name from a small pool, to provoke collisions, with
// the odd "." / ".." / 255- and 256-byte name.
func (d *differ) pickName() string {
	switch r := d.rng.IntN(100); {
	case r < 3:
		return "."
	case r < 6:
		return ".."
	case r < 7:
		return strings.Repeat("L", journal.NameMax)
	case r < 8:
		return strings.Repeat("N", journal.NameMax+1)
	default:
		return string(rune('a' + d.rng.IntN(4)))
	}
}

// pickEntry draws a name of dir, mostly an existing one.
func (d *differ) pickEntry(dir journal.Ino) string {
	if n, ok := d.m.inodes[dir]; ok && n.attr.Type == journal.TypeDir && len(n.entries) > 0 && d.rng.IntN(10) < 7 {
		return pick(d, slices.Sorted(maps.Keys(n.entries))...)
	}
	return d.pickName()
}

// pickInoWhere draws a live inode satisfying ok, or the bogus one (also
// when none does).
func (d *differ) pickInoWhere(e env, bogusPct int, ok func(*inode) bool) (journal.Ino, string) {
	var cands []journal.Ino
	for _, ino := range e.inos {
		if ok(d.m.inodes[ino]) {
			cands = append(cands, ino)
		}
	}
	if len(cands) == 0 || d.rng.IntN(100) < bogusPct {
		return bogusIno, bogusPath
	}
	ino := pick(d, cands...)
	return ino, e.locs[ino].path
}

func isType(ts ...journal.Type) func(*inode) bool {
	return func(n *inode) bool { return slices.Contains(ts, n.attr.Type) }
}

// anyInode accepts every inode.
func anyInode(*inode) bool { return true }

// pickParent draws a directory, sometimes a non-directory (ENOTDIR) or a
// missing one (ENOENT). Symlinks are never used as parents: the kernel
// would follow them.
func (d *differ) pickParent(e env) (journal.Ino, string) {
	switch r := d.rng.IntN(100); {
	case r < 6:
		return d.pickInoWhere(e, 0, isType(journal.TypeRegular, journal.TypeFIFO, journal.TypeCharDev))
	case r < 11:
		return bogusIno, bogusPath
	}
	return d.pickInoWhere(e, 0, isType(journal.TypeDir))
}

func (d *differ) locOf(e env, ino journal.Ino) loc {
	if l, ok := e.locs[ino]; ok {
		return l
	}
	return loc{bogusPath, journal.RootIno}
}

func (d *differ) opCreate(c journal.Caller, e env) bool {
	parent, prel := d.pickParent(e)
	name := d.pickName()
	mode := pick(d, uint32(0o644), 0o600, 0o755, 0o4755, 0o2755, 0o2745, 0o6777, 0o666, 0o2775, 0, 0o2746, 0o2766, 0o4766)
	if !d.canModifyDir(c, parent) {
		return false
	}
	rel := prel + "/" + name
	op := d.record(c, "create %s %#o", trunc(rel), mode)
	_, merr := d.m.Create(d.t.Context(), c, parent, name, mode)
	kerr := asCaller(c, func() error {
		fd, err := unix.Open(d.abs(rel), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, mode)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
	d.compareErr(op, merr, kerr)
	return true
}

var typeBits = map[journal.Type]uint32{
	journal.TypeRegular: unix.S_IFREG, journal.TypeDir: unix.S_IFDIR, journal.TypeSymlink: unix.S_IFLNK,
	journal.TypeFIFO: unix.S_IFIFO, journal.TypeSocket: unix.S_IFSOCK, journal.TypeCharDev: unix.S_IFCHR,
	journal.TypeBlockDev: unix.S_IFBLK,
}

func (d *differ) opMknod(c journal.Caller, e env) bool {
	parent, prel := d.pickParent(e)
	name := d.pickName()
	typ := pick(d, journal.TypeFIFO, journal.TypeFIFO, journal.TypeSocket, journal.TypeRegular, journal.TypeCharDev,
		journal.TypeBlockDev, journal.TypeDir, journal.TypeSymlink)
	if !c.Privileged() && (typ == journal.TypeCharDev || typ == journal.TypeBlockDev) {
		typ = journal.TypeFIFO // devices take CAP_MKNOD, which the kernel checks
	}
	mode := pick(d, uint32(0o644), 0o600, 0o2755, 0o4711, 0o666)
	rdev := unix.Mkdev(uint32(1+d.rng.IntN(8)), uint32(d.rng.IntN(10)))
	if !d.canModifyDir(c, parent) {
		return false
	}
	rel := prel + "/" + name
	op := d.record(c, "mknod %s %v %#o %#x", trunc(rel), typ, mode, rdev)
	_, merr := d.m.Mknod(d.t.Context(), c, parent, name, typ, mode, rdev)
	kerr := asCaller(c, func() error { return unix.Mknod(d.abs(rel), typeBits[typ]|mode, int(rdev)) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opMkdir(c journal.Caller, e env) bool {
	parent, prel := d.pickParent(e)
	if d.isDir(parent) {
		for d.m.depth(parent) >= 3 { // keep the tree shallow: more collisions
			parent = d.m.inodes[parent].parent
			prel = e.locs[parent].path
		}
	}
	name := d.pickName()
	mode := pick(d, uint32(0o755), 0o777, 0o1777, 0o2775, 0o2777, 0o700, 0o555, 0o7777, 0o3777, 0o711)
	if !d.canModifyDir(c, parent) {
		return false
	}
	rel := prel + "/" + name
	op := d.record(c, "mkdir %s %#o", trunc(rel), mode)
	_, merr := d.m.Mkdir(d.t.Context(), c, parent, name, mode)
	kerr := asCaller(c, func() error { return unix.Mkdir(d.abs(rel), mode) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opSymlink(c journal.Caller, e env) bool {
	parent, prel := d.pickParent(e)
	name := d.pickName()
	target := pick(d, "a", "../b", "/etc/passwd", "x/y/z", "a", "../b",
		strings.Repeat("t", journal.SymlinkMax), strings.Repeat("t", journal.SymlinkMax+1), "")
	if !d.canModifyDir(c, parent) {
		return false
	}
	rel := prel + "/" + name
	op := d.record(c, "symlink %s -> %s", trunc(rel), trunc(target))
	_, merr := d.m.Symlink(d.t.Context(), c, parent, name, target)
	kerr := asCaller(c, func() error { return unix.Symlink(target, d.abs(rel)) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opLink(c journal.Caller, e env) bool {
	src, srel := d.pickInoWhere(e, 5, anyInode)
	parent, prel := d.pickParent(e)
	name := d.pickName()
	if !c.Privileged() {
		// fs.protected_hardlinks: an unprivileged caller links its own files.
		n, ok := d.m.inodes[src]
		if !ok || n.attr.UID != c.UID || !d.searchable(c, d.locOf(e, src).dir) || !d.canModifyDir(c, parent) {
			return false
		}
	}
	rel := prel + "/" + name
	op := d.record(c, "link %s -> %s", srel, trunc(rel))
	_, merr := d.m.Link(d.t.Context(), c, src, parent, name)
	kerr := asCaller(c, func() error { return unix.Linkat(unix.AT_FDCWD, d.abs(srel), unix.AT_FDCWD, d.abs(rel), 0) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opUnlink(c journal.Caller, e env) bool {
	parent, prel := d.pickParent(e)
	name := d.pickEntry(parent)
	if !d.canModifyDir(c, parent) {
		return false
	}
	rel := prel + "/" + name
	op := d.record(c, "unlink %s", trunc(rel))
	merr := d.m.Unlink(d.t.Context(), c, parent, name)
	kerr := asCaller(c, func() error { return unix.Unlinkat(unix.AT_FDCWD, d.abs(rel), 0) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opRmdir(c journal.Caller, e env) bool {
	parent, prel := d.pickParent(e)
	name := d.pickEntry(parent)
	if !d.canModifyDir(c, parent) {
		return false
	}
	rel := prel + "/" + name
	op := d.record(c, "rmdir %s", trunc(rel))
	merr := d.m.Rmdir(d.t.Context(), c, parent, name)
	kerr := asCaller(c, func() error { return unix.Unlinkat(unix.AT_FDCWD, d.abs(rel), unix.AT_REMOVEDIR) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opRename(c journal.Caller, e env) bool {
	p1, rel1 := d.pickParent(e)
	n1 := d.pickEntry(p1)
	p2, rel2 := d.pickParent(e)
	if d.rng.IntN(3) == 0 {
		p2, rel2 = p1, rel1
	}
	n2 := d.pickEntry(p2)
	flags := pick(d, journal.RenameFlags(0), 0, 0, journal.RenameNoReplace, journal.RenameExchange, journal.RenameExchange)
	if d.rng.IntN(40) == 0 {
		flags = pick(d, journal.RenameNoReplace|journal.RenameExchange, 1<<5)
	}
	if !c.Privileged() {
		if !d.canModifyDir(c, p1) || !d.canModifyDir(c, p2) {
			return false
		}
		// Moving a directory to another parent rewrites its "..": the
		// kernel wants write permission on it.
		if p1 != p2 {
			if n, ok := d.child(p1, n1); ok && n.attr.Type == journal.TypeDir && !permits(c, n, unix.W_OK) {
				return false
			}
			if n, ok := d.child(p2, n2); ok && flags&journal.RenameExchange != 0 && n.attr.Type == journal.TypeDir && !permits(c, n, unix.W_OK) {
				return false
			}
		}
	}
	from, to := rel1+"/"+n1, rel2+"/"+n2
	op := d.record(c, "rename %s -> %s flags %#x", trunc(from), trunc(to), flags)
	merr := d.m.Rename(d.t.Context(), c, p1, n1, p2, n2, flags)
	kerr := asCaller(c, func() error {
		return unix.Renameat2(unix.AT_FDCWD, d.abs(from), unix.AT_FDCWD, d.abs(to), uint(flags))
	})
	d.compareErr(op, merr, kerr)
	return true
}

// child returns the inode name names in dir, if any.
func (d *differ) child(dir journal.Ino, name string) (*inode, bool) {
	n, ok := d.m.inodes[dir]
	if !ok || n.attr.Type != journal.TypeDir {
		return nil, false
	}
	ino, ok := n.entries[name]
	if !ok {
		return nil, false
	}
	return d.m.inodes[ino], true
}

// pickData draws a regular file mostly; root sometimes gets a directory,
// anyone the missing inode.
func (d *differ) pickData(c journal.Caller, e env) (journal.Ino, string) {
	if c.Privileged() && d.rng.IntN(100) < 8 {
		return d.pickInoWhere(e, 0, isType(journal.TypeDir))
	}
	return d.pickInoWhere(e, 5, isType(journal.TypeRegular))
}

func (d *differ) size(ino journal.Ino) int64 {
	if n, ok := d.m.inodes[ino]; ok {
		return int64(n.attr.Size)
	}
	return 0
}

func (d *differ) pickOff(ino journal.Ino) int64 {
	size := d.size(ino)
	switch d.rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return size
	case 2:
		return size + d.rng.Int64N(9000)
	case 3:
		return max(0, 4096*d.rng.Int64N(5)-1)
	default:
		return d.rng.Int64N(20000)
	}
}

func (d *differ) randBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(d.rng.Uint32())
	}
	return b
}

func (d *differ) isDir(ino journal.Ino) bool {
	n, ok := d.m.inodes[ino]
	return ok && n.attr.Type == journal.TypeDir
}

func (d *differ) opWrite(c journal.Caller, e env) bool {
	ino, rel := d.pickData(c, e)
	off := d.pickOff(ino)
	if d.rng.IntN(50) == 0 && !d.isDir(ino) { // a directory cannot be opened for writing
		off = -1
	}
	p := d.randBytes(pick(d, 0, 1+d.rng.IntN(5000), 1+d.rng.IntN(100), 9000))
	if !d.canAccess(c, ino, d.locOf(e, ino), unix.W_OK) {
		return false
	}
	op := d.record(c, "write %s at %d, %d bytes", rel, off, len(p))
	mn, merr := d.m.Write(d.t.Context(), c, ino, p, off)
	var kn int
	kerr := asCaller(c, func() error {
		fd, err := unix.Open(d.abs(rel), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		kn, err = unix.Pwrite(fd, p, off)
		return err
	})
	d.compareErr(op, merr, kerr)
	if merr == nil && mn != kn {
		d.fail("%s: model wrote %d bytes, Linux %d", op, mn, kn)
	}
	return true
}

func (d *differ) opRead(c journal.Caller, e env) bool {
	ino, rel := d.pickData(c, e)
	off := d.pickOff(ino)
	if d.rng.IntN(50) == 0 {
		off = -1
	}
	mbuf, kbuf := make([]byte, d.rng.IntN(9000)), make([]byte, 0)
	kbuf = append(kbuf, mbuf...)
	op := d.record(c, "read %s at %d, %d bytes", rel, off, len(mbuf))
	mn, merr := d.m.Read(d.t.Context(), ino, mbuf, off)
	var kn int
	fd, kerr := unix.Open(d.abs(rel), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if kerr == nil {
		kn, kerr = unix.Pread(fd, kbuf, off)
		unix.Close(fd)
	}
	d.compareErr(op, merr, kerr)
	if merr == nil && !bytes.Equal(mbuf[:mn], kbuf[:kn]) {
		d.fail("%s: model read %d bytes, Linux %d, first difference at %d", op, mn, kn, firstDiff(mbuf[:mn], kbuf[:kn]))
	}
	return true
}

func (d *differ) opTruncate(c journal.Caller, e env) bool {
	ino, rel := d.pickData(c, e)
	size := d.size(ino)
	newSize := pick(d, 0, size/2, size, size+d.rng.Int64N(10000), d.rng.Int64N(70000))
	if !d.canAccess(c, ino, d.locOf(e, ino), unix.W_OK) {
		return false
	}
	op := d.record(c, "truncate %s to %d", rel, newSize)
	_, merr := d.m.SetAttr(d.t.Context(), c, ino, journal.SetAttrIn{Valid: journal.SetSize, Size: uint64(newSize)})
	kerr := asCaller(c, func() error {
		fd, err := unix.Open(d.abs(rel), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Ftruncate(fd, newSize)
	})
	d.compareErr(op, merr, kerr)
	return true
}

// owns reports whether an unprivileged c may change ino's mode, owner or
// times: it must own it and reach it.
func (d *differ) owns(c journal.Caller, e env, ino journal.Ino) bool {
	if c.Privileged() {
		return true
	}
	n, ok := d.m.inodes[ino]
	return ok && n.attr.UID == c.UID && d.searchable(c, d.locOf(e, ino).dir)
}

func (d *differ) opChmod(c journal.Caller, e env) bool {
	ino, rel := d.pickInoWhere(e, 4, anyInode)
	mode := pick(d, uint32(0o755), 0o644, 0o4755, 0o2755, 0o2745, 0o6711, 0o1777, 0o2777, 0o7777, 0o600, 0o777, 0o3777, 0,
		0o2746, 0o2766, 0o4766, 0o6777)
	if ino == journal.RootIno { // keep the tree reachable for the unprivileged callers
		mode = pick(d, uint32(0o755), 0o777, 0o1777, 0o2777, 0o3777, 0o2755)
	}
	if !d.owns(c, e, ino) {
		return false
	}
	op := d.record(c, "chmod %s %#o", rel, mode)
	_, merr := d.m.SetAttr(d.t.Context(), c, ino, journal.SetAttrIn{Valid: journal.SetMode, Mode: mode})
	kerr := asCaller(c, func() error { return unix.Fchmodat(unix.AT_FDCWD, d.abs(rel), mode, unix.AT_SYMLINK_NOFOLLOW) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opChown(c journal.Caller, e env) bool {
	ino, rel := d.pickInoWhere(e, 4, anyInode)
	uid, gid := pick(d, -1, 0, 1000, 1001), pick(d, -1, 0, 1000, 2000)
	if !c.Privileged() {
		uid = pick(d, -1, int(c.UID))
		gid = pick(d, -1, int(c.GID), int(c.Groups[d.rng.IntN(len(c.Groups))]))
	}
	if uid == -1 && gid == -1 {
		gid = int(c.GID) // chown(-1, -1) is a FUSE setattr without uid or gid
	}
	if !d.owns(c, e, ino) {
		return false
	}
	in := journal.SetAttrIn{UID: uint32(uid), GID: uint32(gid)}
	if uid != -1 {
		in.Valid |= journal.SetUID
	}
	if gid != -1 {
		in.Valid |= journal.SetGID
	}
	op := d.record(c, "chown %s %d:%d", rel, uid, gid)
	_, merr := d.m.SetAttr(d.t.Context(), c, ino, in)
	kerr := asCaller(c, func() error { return unix.Fchownat(unix.AT_FDCWD, d.abs(rel), uid, gid, unix.AT_SYMLINK_NOFOLLOW) })
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opUtimes(c journal.Caller, e env) bool {
	ino, rel := d.pickInoWhere(e, 4, anyInode)
	if !d.owns(c, e, ino) {
		return false
	}
	var in journal.SetAttrIn
	ts := make([]unix.Timespec, 2)
	kinds := [2]int{d.rng.IntN(3), d.rng.IntN(3)} // omit, now, explicit
	if kinds == [2]int{0, 0} {
		kinds[1] = 1
	}
	for i, k := range kinds {
		explicit := int64(1_000_000_000)*d.rng.Int64N(2_000_000_000) + d.rng.Int64N(1_000_000_000)
		switch k {
		case 0:
			ts[i] = unix.Timespec{Nsec: unix.UTIME_OMIT}
		case 1:
			ts[i] = unix.Timespec{Nsec: unix.UTIME_NOW}
			in.Valid |= [2]journal.SetAttrValid{journal.SetAtimeNow, journal.SetMtimeNow}[i]
		case 2:
			ts[i] = unix.NsecToTimespec(explicit)
			in.Valid |= [2]journal.SetAttrValid{journal.SetAtime, journal.SetMtime}[i]
			if i == 0 {
				in.Atime = explicit
			} else {
				in.Mtime = explicit
			}
		}
	}
	op := d.record(c, "utimes %s %v", rel, kinds)
	_, merr := d.m.SetAttr(d.t.Context(), c, ino, in)
	kerr := asCaller(c, func() error { return unix.UtimesNanoAt(unix.AT_FDCWD, d.abs(rel), ts, unix.AT_SYMLINK_NOFOLLOW) })
	d.compareErr(op, merr, kerr)
	if merr == nil {
		a := d.m.inodes[ino].attr
		var st unix.Stat_t
		if err := unix.Lstat(d.abs(rel), &st); err != nil {
			d.fail("%s: stat: %v", op, err)
		}
		if kinds[0] == 2 && st.Atim.Nano() != a.Atime || kinds[1] == 2 && st.Mtim.Nano() != a.Mtime {
			d.fail("%s: explicit times: model %d/%d, Linux %d/%d", op, a.Atime, a.Mtime, st.Atim.Nano(), st.Mtim.Nano())
		}
	}
	return true
}

func (d *differ) opFallocate(c journal.Caller, e env) bool {
	ino, rel := d.pickData(c, e)
	mode := pick(d, journal.FallocMode(0), 0, journal.FallocKeepSize, journal.FallocPunchHole|journal.FallocKeepSize,
		journal.FallocPunchHole|journal.FallocKeepSize)
	off, length := d.pickOff(ino), 1+d.rng.Int64N(20000)
	if !d.isDir(ino) { // a directory cannot be opened for writing: only valid arguments reach its type check
		switch d.rng.IntN(30) {
		case 0:
			off = -1
		case 1:
			length = 0
		case 2:
			mode = journal.FallocPunchHole
		case 3:
			mode = 0x08 // FALLOC_FL_COLLAPSE_RANGE
		}
	}
	if !d.canAccess(c, ino, d.locOf(e, ino), unix.W_OK) {
		return false
	}
	op := d.record(c, "fallocate %s mode %#x [%d, +%d)", rel, mode, off, length)
	merr := d.m.Fallocate(d.t.Context(), c, ino, mode, off, length)
	kerr := asCaller(c, func() error {
		fd, err := unix.Open(d.abs(rel), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Fallocate(fd, uint32(mode), off, length)
	})
	d.compareErr(op, merr, kerr)
	return true
}

func (d *differ) opCopyFileRange(c journal.Caller, e env) bool {
	in, inRel := d.pickData(c, e)
	out, outRel := d.pickInoWhere(e, 3, isType(journal.TypeRegular))
	if d.rng.IntN(4) == 0 {
		out, outRel = in, inRel
	}
	inOff, outOff := d.pickOff(in), d.pickOff(out)
	if d.rng.IntN(5) == 0 { // near the input: overlap checks
		outOff = max(0, inOff+d.rng.Int64N(2000)-1000)
	}
	n := pick(d, 0, d.rng.Int64N(10000), d.rng.Int64N(100))
	if !d.canAccess(c, in, d.locOf(e, in), unix.R_OK) || !d.canAccess(c, out, d.locOf(e, out), unix.W_OK) {
		return false
	}
	op := d.record(c, "copy_file_range %s@%d -> %s@%d, %d bytes", inRel, inOff, outRel, outOff, n)
	mn, merr := d.m.CopyFileRange(d.t.Context(), c, in, inOff, out, outOff, n)
	var kn int
	kerr := asCaller(c, func() error {
		rfd, err := unix.Open(d.abs(inRel), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(rfd)
		wfd, err := unix.Open(d.abs(outRel), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(wfd)
		ioff, ooff := inOff, outOff
		kn, err = unix.CopyFileRange(rfd, &ioff, wfd, &ooff, int(n), 0)
		return err
	})
	d.compareErr(op, merr, kerr)
	if merr == nil && mn != int64(kn) {
		d.fail("%s: model copied %d bytes, Linux %d", op, mn, kn)
	}
	return true
}

// opLseek compares SEEK_DATA/SEEK_HOLE loosely: the model reports no
// holes, tmpfs reports real ones; both must agree on ENXIO at or beyond
// the end, and Linux's answer must lie in [off, size].
func (d *differ) opLseek(c journal.Caller, e env) bool {
	ino, rel := d.pickData(c, e)
	size := d.size(ino)
	off := pick(d, 0, size, size+1, d.rng.Int64N(size+2), -1)
	whence := pick(d, journal.SeekData, journal.SeekHole)
	op := d.record(c, "lseek %s %d whence %d", rel, off, whence)
	mpos, merr := d.m.Lseek(d.t.Context(), ino, off, whence)
	var kpos int64
	fd, kerr := unix.Open(d.abs(rel), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if kerr == nil {
		kpos, kerr = unix.Seek(fd, off, whence)
		unix.Close(fd)
	}
	if merr == nil && whence == journal.SeekData && kernelClass(kerr) == journal.ErrNoSeekData.Error() {
		d.outcomes["lseek data in a trailing hole"]++
		return true // tmpfs: only holes from off to the end
	}
	d.compareErr(op, merr, kerr)
	if merr == nil && (kpos < off || kpos > size || whence == journal.SeekData && kpos == size || mpos < off) {
		d.fail("%s: model %d, Linux %d, size %d", op, mpos, kpos, size)
	}
	return true
}

func (d *differ) opLookup(c journal.Caller, e env) bool {
	parent, prel := d.pickParent(e)
	name := d.pickEntry(parent)
	if parent == journal.RootIno && name == ".." {
		name = "." // the mount root's ".." leaves the tmpfs
	}
	rel := prel + "/" + name
	op := d.record(c, "lookup %s", trunc(rel))
	a, merr := d.m.Lookup(d.t.Context(), parent, name)
	var st unix.Stat_t
	kerr := unix.Lstat(d.abs(rel), &st)
	d.compareErr(op, merr, kerr)
	if merr == nil && d.k2m[st.Ino] != a.Ino {
		d.fail("%s: model inode %d, Linux inode %d (model %d)", op, a.Ino, st.Ino, d.k2m[st.Ino])
	}
	return true
}

func (d *differ) opReadlink(c journal.Caller, e env) bool {
	ino, rel := d.pickInoWhere(e, 4, anyInode)
	op := d.record(c, "readlink %s", rel)
	mt, merr := d.m.Readlink(d.t.Context(), ino)
	buf := make([]byte, 8192)
	kn, kerr := unix.Readlink(d.abs(rel), buf)
	d.compareErr(op, merr, kerr)
	if merr == nil && mt != string(buf[:kn]) {
		d.fail("%s: model %q, Linux %q", op, mt, buf[:kn])
	}
	return true
}

func (d *differ) opReadDir(c journal.Caller, e env) bool {
	ino, rel := d.pickInoWhere(e, 4, func(n *inode) bool { return n.attr.Type != journal.TypeSymlink })
	op := d.record(c, "readdir %s", rel)
	_, merr := d.m.ReadDir(d.t.Context(), ino)
	fd, kerr := unix.Open(d.abs(rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if kerr == nil {
		unix.Close(fd)
	}
	d.compareErr(op, merr, kerr)
	return true
}

// trunc shortens long names in logs.
func trunc(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%s...(%d bytes)", s[:20], len(s))
	}
	return s
}
