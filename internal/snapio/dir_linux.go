package snapio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore"
)

// devIno names an inode of the source file system.
type devIno struct{ dev, ino uint64 }

// fromDir reads the tree at dir.
func (b *builder) fromDir(ctx context.Context, dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return dirErr(dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%w: %s is not a directory", chunkstore.ErrInvalid, dir)
	}
	b.root = nodeFromStat(&st)
	b.root.kids = make(map[string]*node)
	var err error
	if b.root.xattrs, err = readXattrs(dir); err != nil {
		return err
	}
	return b.walkDir(ctx, dir, "", b.root, make(map[devIno]*node))
}

func (b *builder) walkDir(ctx context.Context, abs, rel string, dir *node, links map[devIno]*node) error {
	f, err := os.Open(abs)
	if err != nil {
		return dirErr(abs, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return dirErr(abs, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		cabs, crel := abs+"/"+name, path.Join(rel, name)
		if err := checkName(cabs, name); err != nil {
			return err
		}
		if p, ok := b.excl.match(crel); ok {
			b.exclude(crel, p)
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(cabs, &st); err != nil {
			return dirErr(cabs, err)
		}
		key := devIno{st.Dev, st.Ino}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if !isDir && st.Nlink > 1 {
			if n, ok := links[key]; ok {
				dir.kids[name] = n
				b.added()
				continue
			}
		}
		n := nodeFromStat(&st)
		if n.xattrs, err = readXattrs(cabs); err != nil {
			return err
		}
		dir.kids[name] = n
		switch n.typ {
		case chunkstore.TypeDir:
			n.kids = make(map[string]*node)
			b.added()
			if err := b.walkDir(ctx, cabs, crel, n, links); err != nil {
				return err
			}
			continue
		case chunkstore.TypeRegular:
			if err := b.readFile(ctx, cabs, n, &st); err != nil {
				return err
			}
		case chunkstore.TypeSymlink:
			if n.target, err = os.Readlink(cabs); err != nil {
				return dirErr(cabs, err)
			}
			n.size = uint64(len(n.target))
		case chunkstore.TypeCharDev, chunkstore.TypeBlockDev:
			n.rdev = st.Rdev
		}
		if st.Nlink > 1 {
			links[key] = n
		}
		b.added()
	}
	return nil
}

func nodeFromStat(st *unix.Stat_t) *node {
	n := &node{mode: st.Mode & 0o7777, uid: st.Uid, gid: st.Gid,
		atime: st.Atim.Nano(), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		n.typ = chunkstore.TypeRegular
	case unix.S_IFDIR:
		n.typ = chunkstore.TypeDir
	case unix.S_IFLNK:
		n.typ = chunkstore.TypeSymlink
	case unix.S_IFIFO:
		n.typ = chunkstore.TypeFIFO
	case unix.S_IFSOCK:
		n.typ = chunkstore.TypeSocket
	case unix.S_IFCHR:
		n.typ = chunkstore.TypeCharDev
	case unix.S_IFBLK:
		n.typ = chunkstore.TypeBlockDev
	}
	return n
}

// readFile stores a regular file's content: inline when tiny, else without
// its holes.
func (b *builder) readFile(ctx context.Context, p string, n *node, st *unix.Stat_t) error {
	// O_NOATIME leaves the source's atimes alone (only the owner or root
	// may ask); O_NONBLOCK keeps a file swapped for a FIFO from hanging us.
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Open(p, flags|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		fd, err = unix.Open(p, flags, 0)
	}
	if err != nil {
		return dirErr(p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino {
		return fmt.Errorf("%s changed while being imported", p)
	}
	size := uint64(st.Size)
	if size <= chunkstore.InlineMax {
		buf := make([]byte, size+1)
		k, err := io.ReadFull(f, buf)
		if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
			return dirErr(p, err)
		}
		if uint64(k) != size {
			return fmt.Errorf("%s changed while being imported (%d bytes, not %d)", p, k, size)
		}
		if k > 0 {
			n.inline = buf[:k:k]
		}
		n.size = size
		counter{b}.add(k)
		return nil
	}
	ranges, err := chunkstore.DataRanges(f, size)
	if err != nil {
		return dirErr(p, err)
	}
	fc, err := b.store.PutSparseFile(ctx, countingReaderAt{f, counter{b}}, size, ranges)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s changed while being imported (it shrank): %w", p, err)
		}
		return fmt.Errorf("%s: %w", p, err)
	}
	n.content, n.size = fc, size
	return nil
}

type countingReaderAt struct {
	r io.ReaderAt
	c counter
}

func (c countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.c.add(n)
	return n, err
}

// readXattrs reads a path's extended attributes (not following symlinks).
func readXattrs(p string) ([]chunkstore.Xattr, error) {
	var names []byte
	for {
		n, err := unix.Llistxattr(p, nil)
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, dirErr(p, err)
		}
		if n == 0 {
			return nil, nil
		}
		names = make([]byte, n)
		if n, err = unix.Llistxattr(p, names); errors.Is(err, unix.ERANGE) {
			continue // the list grew in between
		} else if err != nil {
			return nil, dirErr(p, err)
		}
		names = names[:n]
		break
	}
	var out []chunkstore.Xattr
	for _, name := range strings.Split(strings.TrimRight(string(names), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		v, err := getXattr(p, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed in between
		}
		if err != nil {
			return nil, fmt.Errorf("%s: xattr %s: %w", p, name, err)
		}
		out = append(out, chunkstore.Xattr{Name: name, Value: v})
	}
	return sortXattrs(out), nil
}

func getXattr(p, name string) ([]byte, error) {
	for {
		n, err := unix.Lgetxattr(p, name, nil)
		if err != nil || n == 0 {
			return nil, err
		}
		v := make([]byte, n)
		n, err = unix.Lgetxattr(p, name, v)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		return v[:n], err
	}
}

// dirErr names the path in err once (os errors already do).
func dirErr(p string, err error) error {
	var pe *os.PathError
	var le *os.LinkError
	if errors.As(err, &pe) || errors.As(err, &le) {
		return err
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w (%w)", p, err, chunkstore.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", p, err)
}
