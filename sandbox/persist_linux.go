package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Persisted paths, the parent's side: make sure each has its storage in the
// workspace, seeding it from the base on first use. This runs as host root
// writing through the workspace path, so what it stores keeps the base's
// owners (uid 0 stays 0), which the id-mapped /workspace then shows as the
// sandbox's own.
//
// The workspace's content is the agent's: every path in it is resolved
// beneath the workspace with no symlink followed (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), so that a symlink planted in .cairn cannot make host
// root write elsewhere.

// preparePersist creates and seeds the storage of every persisted path that
// has none yet.
func preparePersist(ctx context.Context, workspace, base string, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	binds, all := persistPlan(paths)
	ws, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: workspace: %w", err)
	}
	defer unix.Close(ws)
	store, err := mkdirAllBeneath(ws, PersistDir)
	if err != nil {
		return fmt.Errorf("sandbox: persisted paths: create %s in the workspace: %w", PersistDir, err)
	}
	defer unix.Close(store)
	baseFD, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: root filesystem %s: %w", base, err)
	}
	defer unix.Close(baseFD)

	for _, p := range all {
		rel := strings.TrimPrefix(p, "/")
		fd, err := openBeneath(store, rel, unix.O_PATH)
		if err == nil {
			unix.Close(fd)
			continue // seeded by an earlier run (or inside its parent's seed)
		}
		if !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("sandbox: persisted path %s: its storage %s in the workspace: %w (remove it to seed it afresh)",
				p, persistRel(p), err)
		}
		nested := !slices.Contains(binds, p)
		if err := seedPersist(ctx, store, baseFD, rel, base == "/", nested); err != nil {
			return fmt.Errorf("sandbox: persisted path %s: %w", p, err)
		}
	}
	return nil
}

// seedPersist copies base/rel into store/rel. A nested path that the base
// lacks becomes an empty directory (its parent's storage holds it); a bound
// one must exist in the base, which provides its mount point.
func seedPersist(ctx context.Context, store, baseFD int, rel string, hostBase, nested bool) error {
	parent, err := mkdirAllBeneath(store, path.Dir(rel))
	if err != nil {
		return fmt.Errorf("create its parent in the workspace: %w", err)
	}
	defer unix.Close(parent)
	name := path.Base(rel)

	src, err := openBeneath(baseFD, rel, unix.O_PATH)
	switch {
	case errors.Is(err, unix.ENOENT) && nested:
		if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create its storage: %w", err)
		}
		return nil
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("it does not exist in the root filesystem, which must provide the mount point: %w", ErrInvalid)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("it is, or is beneath, a symlink in the root filesystem; persist the symlink's target: %w", ErrInvalid)
	case err != nil:
		return fmt.Errorf("open it in the root filesystem: %w", err)
	}
	defer unix.Close(src)

	// The copy is made under a temporary name and renamed when complete: an
	// interrupted seed leaves no half-seeded storage to be taken as done.
	tmp := ".cairn-seed-" + randomHex(6)
	done := false
	defer func() {
		if !done {
			os.RemoveAll(fdPath(parent, tmp))
		}
	}()
	c := &copier{ctx: ctx, hostBase: hostBase, links: map[devIno]string{}}
	if err := c.seed(src, parent, tmp); err != nil {
		return fmt.Errorf("seed it from the root filesystem: %w", err)
	}
	if err := unix.Renameat2(parent, tmp, parent, name, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("seed it from the root filesystem: %w", err)
	}
	done = true
	return nil
}

// copier copies a tree preserving type, mode, owner, times, symlinks and
// hard links (within the tree). Extended attributes are not copied, nor
// sockets, fifos and device nodes.
//
// hostBase restricts the copy to what the sandbox can read in the base: a
// file readable by others, a directory readable and searchable by others.
// The host's root is not the sandbox's, and the sandbox's root owns its
// persisted copy: seeding /root from the host must not hand the sandbox
// host root's private files. A base image (Spec.RootFS) is the sandbox's
// own, and is copied whole.
type copier struct {
	ctx      context.Context // the copy stops when it ends
	hostBase bool
	root     int // the copy's root directory, for hard links
	links    map[devIno]string
}

type devIno struct{ dev, ino uint64 }

// seed copies src (an O_PATH descriptor) to dstDir/name.
func (c *copier) seed(src, dstDir int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdirat(dstDir, name, 0o700); err != nil {
			return err
		}
		root, err := openBeneath(dstDir, name, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer unix.Close(root)
		c.root = root
		if c.visible(&st) {
			dir, err := unix.Openat(src, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = c.copyDir(dir, root, "")
			if err != nil {
				return err
			}
		}
		return setMetaFD(root, &st)
	case unix.S_IFREG:
		// An O_PATH descriptor is reopened for reading through /proc.
		f, err := unix.Open(fdPath(src, ""), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		return c.copyFile(f, dstDir, name, &st)
	default:
		return fmt.Errorf("not a directory or a regular file: %w", ErrInvalid)
	}
}

// visible reports whether the sandbox may read (and, for a directory,
// search) what st describes in the base.
func (c *copier) visible(st *unix.Stat_t) bool {
	if !c.hostBase {
		return true
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return st.Mode&0o005 == 0o005
	}
	return st.Mode&0o004 != 0
}

// copyDir copies the entries of the open directory src (closed here) into
// dst; rel is dst's path relative to the copy's root.
func (c *copier) copyDir(src, dst int, rel string) error {
	d := os.NewFile(uintptr(src), "dir")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return err
		}
		crel := path.Join(rel, name)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if !c.visible(&st) {
				continue
			}
			if err := c.copySubdir(src, dst, name, crel, &st); err != nil {
				return err
			}
		case unix.S_IFREG:
			if !c.visible(&st) {
				continue
			}
			if st.Nlink > 1 {
				key := devIno{uint64(st.Dev), st.Ino}
				if first, ok := c.links[key]; ok {
					if err := unix.Linkat(c.root, first, dst, name, 0); err == nil {
						continue
					}
					// Fall back to a copy (e.g. a filesystem without links).
				} else {
					c.links[key] = crel
				}
			}
			f, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if err := c.copyFile(f, dst, name, &st); err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := readlinkat(src, name)
			if err != nil {
				return err
			}
			if err := unix.Symlinkat(target, dst, name); err != nil {
				return err
			}
			if err := setLinkMeta(dst, name, &st); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *copier) copySubdir(src, dst int, name, rel string, st *unix.Stat_t) error {
	if err := unix.Mkdirat(dst, name, 0o700); err != nil {
		return err
	}
	sub, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	dsub, err := unix.Openat(dst, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(sub)
		return err
	}
	defer unix.Close(dsub)
	if err := c.copyDir(sub, dsub, rel); err != nil {
		return err
	}
	return setMetaFD(dsub, st)
}

// copyFile copies the open file f (closed here) to dst/name.
func (c *copier) copyFile(f, dst int, name string, st *unix.Stat_t) error {
	in := os.NewFile(uintptr(f), name)
	defer in.Close()
	out, err := unix.Openat(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	o := os.NewFile(uintptr(out), name)
	_, err = io.Copy(o, in)
	if err == nil {
		err = setMetaFD(out, st)
	}
	if cerr := o.Close(); err == nil {
		err = cerr
	}
	return err
}

// setMetaFD gives the open file or directory fd the owner, mode and times
// of st; through the descriptor, so that nothing renamed or replaced
// meanwhile is touched instead. The owner goes first: chown clears set-id
// bits.
func setMetaFD(fd int, st *unix.Stat_t) error {
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, fdPath(fd, ""), ts, 0)
}

// setLinkMeta gives the symlink dir/name the owner and times of st.
func setLinkMeta(dir int, name string, st *unix.Stat_t) error {
	if err := unix.Fchownat(dir, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(dir, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func readlinkat(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// openBeneath opens rel beneath dir without following any symlink nor
// leaving dir.
func openBeneath(dir int, rel string, flags int) (int, error) {
	if rel == "." || rel == "" {
		return unix.Openat(dir, ".", flags|unix.O_CLOEXEC, 0)
	}
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(dir, rel, &how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

// mkdirAllBeneath creates the directories of rel beneath dir (mode 0755,
// owned by the caller) that are missing and returns the last one, open.
func mkdirAllBeneath(dir int, rel string) (int, error) {
	cur, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "." || rel == "" {
		return cur, nil
	}
	for _, comp := range strings.Split(rel, "/") {
		if err := unix.Mkdirat(cur, comp, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, err
		}
		next, err := openBeneath(cur, comp, unix.O_RDONLY|unix.O_DIRECTORY)
		unix.Close(cur)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("%s is a symlink or not a directory: %w", comp, err)
		}
		if err != nil {
			return -1, fmt.Errorf("%s: %w", comp, err)
		}
		cur = next
	}
	return cur, nil
}

// fdPath is the /proc path of name relative to the open directory fd.
func fdPath(fd int, name string) string {
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	if name != "" {
		p += "/" + name
	}
	return p
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
