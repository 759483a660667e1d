package local

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

const (
	lockName  = ".cairn-lock"
	tmpPrefix = ".tmp-"
)

// Backend stores objects as files under a root directory.
type Backend struct {
	root string
}

var _ backend.Backend = (*Backend)(nil)

// Options configure Open.
type Options struct {
	// Create makes the root directory (and parents) if it does not exist.
	// Default false: a missing directory is backend.ErrNotFound.
	Create bool
}

// Open opens the store directory dir.
func Open(dir string, opts Options) (*Backend, error) {
	if dir == "" {
		return nil, fmt.Errorf("local store: empty directory path")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	if opts.Create {
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return nil, fmt.Errorf("create local store directory %s: %w", abs, mapErr(err))
		}
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("local store directory %s: %w", abs, mapErr(err))
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("local store %s: not a directory", abs)
	}
	return &Backend{root: abs}, nil
}

// Root returns the absolute path of the store directory.
func (b *Backend) Root() string { return b.root }

func (b *Backend) path(key string) (string, error) {
	if err := backend.ValidateKey(key); err != nil {
		return "", err
	}
	for _, seg := range strings.Split(key, "/") {
		if strings.HasPrefix(seg, tmpPrefix) || seg == lockName {
			return "", fmt.Errorf("%w: %q uses a name reserved by the local backend", backend.ErrInvalidKey, key)
		}
	}
	return filepath.Join(b.root, filepath.FromSlash(key)), nil
}

// Get implements backend.Backend.
func (b *Backend) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := b.path(key)
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("get %s: negative offset %d", key, offset)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, mapErr(err))
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("get %s: %w", key, mapErr(err))
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("get %s: %w", key, backend.ErrNotFound)
	}
	size := st.Size()
	if offset > 0 && offset >= size {
		f.Close()
		return nil, fmt.Errorf("get %s: offset %d of %d bytes: %w", key, offset, size, backend.ErrRange)
	}
	n := size - offset
	if length >= 0 && length < n {
		n = length
	}
	return &sectionFile{SectionReader: io.NewSectionReader(f, offset, n), f: f}, nil
}

// ReadAll reads a whole object with plain system calls: cheaper than Get
// for the many small objects a history walk reads (no os.File set-up).
func (b *Backend) ReadAll(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := b.path(key)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, mapErr(&fs.PathError{Op: "open", Path: p, Err: err}))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, mapErr(err))
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil, fmt.Errorf("get %s: %w", key, backend.ErrNotFound)
	}
	data := make([]byte, st.Size)
	for off := 0; off < len(data); {
		n, err := unix.Pread(fd, data[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, mapErr(err))
		}
		if n == 0 {
			return nil, fmt.Errorf("get %s: %w", key, io.ErrUnexpectedEOF)
		}
		off += n
	}
	return data, nil
}

type sectionFile struct {
	*io.SectionReader
	f *os.File
}

func (s *sectionFile) Close() error { return s.f.Close() }

// Put implements backend.Backend.
func (b *Backend) Put(ctx context.Context, key string, body io.ReadSeeker, cond backend.Condition) (backend.Info, error) {
	if err := ctx.Err(); err != nil {
		return backend.Info{}, err
	}
	if err := cond.Validate(); err != nil {
		return backend.Info{}, err
	}
	p, err := b.path(key)
	if err != nil {
		return backend.Info{}, err
	}
	size, err := body.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = body.Seek(0, io.SeekStart)
	}
	if err != nil {
		return backend.Info{}, fmt.Errorf("put %s: rewind body: %w", key, err)
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, mapErr(err))
	}
	tmp, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, mapErr(err))
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var w io.Writer = tmp
	var h *blake3.Hasher
	if size <= hashedETagMax {
		h = blake3.New()
		w = io.MultiWriter(tmp, h)
	}
	var n int64
	if wt, ok := body.(io.WriterTo); ok && h == nil {
		// One write for an in-memory body (a pack), not a 32 KiB loop.
		n, err = wt.WriteTo(w)
	} else {
		n, err = io.Copy(w, readerCtx{ctx, body})
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, mapErr(err))
	}
	if err := tmp.Sync(); err != nil {
		return backend.Info{}, fmt.Errorf("put %s: fsync: %w", key, mapErr(err))
	}
	if err := tmp.Close(); err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, mapErr(err))
	}

	unlock, err := b.lock()
	if err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	defer unlock()
	if cond.IfNoneMatch || cond.IfMatch != "" {
		cur, err := b.statLocked(p, key)
		switch {
		case err != nil && !errors.Is(err, backend.ErrNotFound):
			return backend.Info{}, fmt.Errorf("put %s: %w", key, err)
		case cond.IfNoneMatch && err == nil:
			return backend.Info{}, fmt.Errorf("put %s: object exists: %w", key, backend.ErrConflict)
		case cond.IfMatch != "" && err != nil:
			return backend.Info{}, fmt.Errorf("put %s: object does not exist: %w", key, backend.ErrConflict)
		case cond.IfMatch != "" && cur.ETag != cond.IfMatch:
			return backend.Info{}, fmt.Errorf("put %s: object changed (etag %s, expected %s): %w", key, cur.ETag, cond.IfMatch, backend.ErrConflict)
		}
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, mapErr(err))
	}
	committed = true
	if err := syncDir(dir); err != nil {
		return backend.Info{}, fmt.Errorf("put %s: fsync directory: %w", key, mapErr(err))
	}
	st, err := os.Stat(p)
	if err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, mapErr(err))
	}
	etag := metaETag(st)
	if h != nil {
		etag = hex.EncodeToString(h.Sum(nil)[:16])
	}
	return backend.Info{Key: key, Size: n, ETag: etag, ModTime: st.ModTime()}, nil
}

// readerCtx stops a copy when the context is cancelled.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// lock takes the root's exclusive flock. It serialises renames against
// conditional puts across goroutines and processes.
func (b *Backend) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(b.root, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", mapErr(err))
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil // closing the descriptor drops the lock
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Stat implements backend.Backend.
func (b *Backend) Stat(ctx context.Context, key string) (backend.Info, error) {
	if err := ctx.Err(); err != nil {
		return backend.Info{}, err
	}
	p, err := b.path(key)
	if err != nil {
		return backend.Info{}, err
	}
	info, err := b.statLocked(p, key)
	if err != nil {
		return backend.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return info, nil
}

// statLocked stats and hashes the object at p. Objects are replaced by rename,
// so the opened file is one consistent version.
func (b *Backend) statLocked(p, key string) (backend.Info, error) {
	f, err := os.Open(p)
	if err != nil {
		return backend.Info{}, mapErr(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return backend.Info{}, mapErr(err)
	}
	if st.IsDir() {
		return backend.Info{}, backend.ErrNotFound
	}
	etag := metaETag(st)
	if st.Size() <= hashedETagMax {
		h := blake3.New()
		if _, err := io.Copy(h, f); err != nil {
			return backend.Info{}, mapErr(err)
		}
		etag = hex.EncodeToString(h.Sum(nil)[:16])
	}
	return backend.Info{Key: key, Size: st.Size(), ETag: etag, ModTime: st.ModTime()}, nil
}

// hashedETagMax is the largest object whose ETag is a hash of its content.
// Conditional puts are for small objects (refs, config, leases), which get
// content ETags; hashing every 16 MiB pack again would cost a pass over all
// ingested bytes, so larger objects get an ETag from the file's identity.
const hashedETagMax = 1 << 20

// metaETag names one version of a large object by its inode, size and
// modification time in nanoseconds. Every Put creates a new file (a rename
// of a fresh temporary file), so a new version gets a new inode or mtime.
func metaETag(st os.FileInfo) string {
	var ino uint64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	return fmt.Sprintf("m%x-%x-%x", ino, st.Size(), st.ModTime().UnixNano())
}

// List implements backend.Backend. Listed Infos carry no ETag.
func (b *Backend) List(ctx context.Context, prefix string, fn func(backend.Info) error) error {
	// Walk the deepest directory that contains every key with this prefix.
	start := b.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = filepath.Join(b.root, filepath.FromSlash(prefix[:i]))
	}
	var infos []backend.Info
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := d.Name()
		if strings.HasPrefix(name, tmpPrefix) || (name == lockName && filepath.Dir(p) == b.root) {
			return nil
		}
		rel, err := filepath.Rel(b.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p != start && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while listing
			}
			return err
		}
		infos = append(infos, backend.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, mapErr(err))
	}
	slices.SortFunc(infos, func(a, b backend.Info) int { return strings.Compare(a.Key, b.Key) })
	for _, info := range infos {
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements backend.Backend.
func (b *Backend) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, mapErr(err))
	}
	return nil
}

// Properties implements backend.Backend.
func (b *Backend) Properties() backend.Properties {
	return backend.Properties{Location: b.root, Local: true}
}

// Close implements backend.Backend.
func (b *Backend) Close() error { return nil }

// mapErr wraps OS errors with the backend sentinels and a hint for the
// conditions a person can fix.
func mapErr(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w (%v)", backend.ErrNotFound, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w (%v)", backend.ErrPermission, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("disk full: free space on the store's filesystem and retry: %w", err)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w (%v)", backend.ErrNotFound, err)
	}
	return err
}
