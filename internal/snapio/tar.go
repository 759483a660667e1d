package snapio

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/internal/tarfmt"
)

// fromTar reads the tree of a tar archive.
func (b *builder) fromTar(ctx context.Context, r io.Reader, name string) error {
	in, closeIn, err := decompress(bufio.NewReaderSize(r, 1<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer closeIn()
	b.root = newDir(0o755, uint32(os.Geteuid()), uint32(os.Getegid()), b.now)
	tr := tarfmt.NewReader(in)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			if tr.Offset() == 0 {
				return fmt.Errorf("%s is empty: not a tar archive", name)
			}
			return nil
		}
		if err != nil {
			return corrupt(name, tr, err)
		}
		if err := b.tarEntry(ctx, tr, hdr); err != nil {
			var ce corruptError
			if errors.As(err, &ce) {
				return corrupt(name, tr, ce.err)
			}
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

// corruptError marks an error reading the archive itself.
type corruptError struct{ err error }

func (c corruptError) Error() string { return c.err.Error() }

func corrupt(name string, tr *tarfmt.Reader, err error) error {
	what := "not a valid tar archive"
	if errors.Is(err, io.ErrUnexpectedEOF) && tr.Offset() >= 512 {
		what = "truncated tar archive"
	}
	return fmt.Errorf("%s: %s (at byte %d): %v", name, what, tr.Offset(), err)
}

// decompress recognises gzip and zstd streams by their magic numbers.
func decompress(br *bufio.Reader) (io.Reader, func(), error) {
	magic, _ := br.Peek(6)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	case bytes.HasPrefix(magic, []byte("\xfd7zXZ\x00")), bytes.HasPrefix(magic, []byte("BZh")):
		return nil, nil, errors.New("compressed with xz or bzip2, which cairn does not read: decompress it first (or pipe it: xz -dc FILE | cairn import WORKSPACE -)")
	}
	return br, func() {}, nil
}

// tarEntry adds one archive entry to the tree.
func (b *builder) tarEntry(ctx context.Context, tr *tarfmt.Reader, hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	rel, err := cleanPath(hdr.Name)
	if err != nil {
		return err
	}
	n, err := b.nodeFromHeader(hdr)
	if err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	if rel == "" { // the root directory
		if n.typ != chunkstore.TypeDir {
			return fmt.Errorf("%q: the archive's root is not a directory", hdr.Name)
		}
		n.kids = b.root.kids
		b.root = n
		return nil
	}
	if prefix, pattern, ok := b.excl.matchPrefix(rel); ok {
		b.exclude(prefix, pattern) // once per excluded path, however many entries it holds
		return nil
	}
	dir, base, err := b.parent(rel)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeLink:
		return b.tarLink(rel, hdr.Linkname, dir, base)
	case tar.TypeDir:
		if old, ok := dir.kids[base]; ok && old.typ == chunkstore.TypeDir {
			n.kids = old.kids // listed again, or after its contents: new attributes
		} else {
			n.kids = make(map[string]*node)
		}
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont:
		if err := b.tarFile(ctx, tr, n, hdr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return fmt.Errorf("%s: a symlink with an empty target", rel)
		}
		n.target, n.size = hdr.Linkname, uint64(len(hdr.Linkname))
	case tar.TypeChar, tar.TypeBlock:
		if hdr.Devmajor < 0 || hdr.Devmajor > math.MaxUint32 || hdr.Devminor < 0 || hdr.Devminor > math.MaxUint32 {
			return fmt.Errorf("%s: device number %d:%d out of range", rel, hdr.Devmajor, hdr.Devminor)
		}
		n.rdev = mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
	case tar.TypeFifo:
	default:
		return fmt.Errorf("%s: entry type %q is not supported", rel, hdr.Typeflag)
	}
	dir.kids[base] = n
	b.added()
	return nil
}

// nodeFromHeader makes a node with hdr's type and attributes.
func (b *builder) nodeFromHeader(hdr *tar.Header) (*node, error) {
	if hdr.Uid < 0 || hdr.Uid > math.MaxUint32 || hdr.Gid < 0 || hdr.Gid > math.MaxUint32 {
		return nil, fmt.Errorf("owner %d:%d out of range", hdr.Uid, hdr.Gid)
	}
	n := &node{mode: uint32(hdr.Mode) & 0o7777, uid: uint32(hdr.Uid), gid: uint32(hdr.Gid), mtime: nanos(hdr.ModTime), ctime: b.now}
	n.atime = n.mtime
	if !hdr.AccessTime.IsZero() {
		n.atime = nanos(hdr.AccessTime)
	}
	if !hdr.ChangeTime.IsZero() {
		n.ctime = nanos(hdr.ChangeTime)
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			x := chunkstore.Xattr{Name: name}
			if v != "" {
				x.Value = []byte(v)
			}
			n.xattrs = append(n.xattrs, x)
		}
	}
	sortXattrs(n.xattrs)
	switch hdr.Typeflag {
	case tar.TypeDir:
		n.typ = chunkstore.TypeDir
	case tar.TypeSymlink:
		n.typ = chunkstore.TypeSymlink
	case tar.TypeChar:
		n.typ = chunkstore.TypeCharDev
	case tar.TypeBlock:
		n.typ = chunkstore.TypeBlockDev
	case tar.TypeFifo:
		n.typ = chunkstore.TypeFIFO
	default:
		n.typ = chunkstore.TypeRegular
	}
	return n, nil
}

// nanos converts t to ns since the epoch, clamped to what an int64 holds
// (years 1678 to 2262).
func nanos(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// tarFile stores a regular file's content: inline when tiny, else chunked,
// without the holes of a sparse entry.
func (b *builder) tarFile(ctx context.Context, tr *tarfmt.Reader, n *node, hdr *tar.Header) error {
	size := uint64(hdr.Size)
	n.size = size
	c := counter{b}
	if size <= chunkstore.InlineMax {
		if size > 0 {
			n.inline = make([]byte, size)
			k, err := io.ReadFull(tr, n.inline)
			c.add(k)
			if err != nil {
				return corruptError{unexpected(err)}
			}
		}
		return nil
	}
	var err error
	var fc chunkstore.FileContent
	if frags, ok := tr.Fragments(); ok {
		ranges := make([]chunkstore.Range, len(frags))
		for i, f := range frags {
			ranges[i] = chunkstore.Range{Off: uint64(f.Offset), Len: uint64(f.Length)}
		}
		fc, err = b.store.PutSparseFile(ctx, countingReaderAt{tr, c}, size, ranges)
	} else {
		fc, err = b.store.PutFile(ctx, countingReader{tr, c})
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) {
			return corruptError{err}
		}
		return err
	}
	if fc.Size != size {
		return corruptError{fmt.Errorf("%d bytes of content, the header says %d: %w", fc.Size, size, io.ErrUnexpectedEOF)}
	}
	n.content = fc
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

type countingReader struct {
	r io.Reader
	c counter
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.c.add(n)
	return n, err
}

// tarLink adds rel as another name of the inode at target.
func (b *builder) tarLink(rel, target string, dir *node, base string) error {
	trel, err := cleanPath(target)
	if err != nil {
		return fmt.Errorf("%s: hard link target: %w", rel, err)
	}
	if prefix, pattern, ok := b.excl.matchPrefix(trel); ok {
		b.excludeWhy(rel, fmt.Sprintf("--exclude %s (a hard link to %s, which it excludes)", pattern, prefix))
		return nil
	}
	t := b.root
	for _, c := range strings.Split(trel, "/") {
		if trel == "" || t.kids == nil || t.kids[c] == nil {
			return fmt.Errorf("%s: a hard link to %q, which the archive does not hold before it", rel, target)
		}
		t = t.kids[c]
	}
	if t.typ == chunkstore.TypeDir {
		return fmt.Errorf("%s: a hard link to directory %q", rel, target)
	}
	dir.kids[base] = t
	b.added()
	return nil
}

// parent returns the directory rel goes in (creating the directories the
// archive implies) and rel's base name.
func (b *builder) parent(rel string) (*node, string, error) {
	dir := b.root
	parts := strings.Split(rel, "/")
	for i, c := range parts {
		if err := checkName(rel, c); err != nil {
			return nil, "", err
		}
		if i == len(parts)-1 {
			break
		}
		next, ok := dir.kids[c]
		if !ok {
			next = newDir(0o755, uint32(os.Geteuid()), uint32(os.Getegid()), b.now)
			dir.kids[c] = next
		} else if next.typ != chunkstore.TypeDir {
			return nil, "", fmt.Errorf("%s: %s is not a directory in the archive", rel, strings.Join(parts[:i+1], "/"))
		}
		dir = next
	}
	return dir, parts[len(parts)-1], nil
}

// cleanPath turns an archive path into a path relative to the root ("" for
// the root): leading slashes and "." components go (as GNU tar does), ".."
// is refused.
func cleanPath(name string) (string, error) {
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			return "", fmt.Errorf("%q: a path with \"..\" would leave the workspace", name)
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}
