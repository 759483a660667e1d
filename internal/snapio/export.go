package snapio

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/internal/tarfmt"
)

// Progress counts what an export or import has done so far.
type Progress struct {
	Entries uint64 // tree entries (files, directories, links...) done
	Bytes   uint64 // export: archive bytes written; import: file content bytes read
}

// ExportOptions configure Export. The zero value works.
type ExportOptions struct {
	// Progress, if set, is called with running totals as the archive is
	// written (often: throttle what you print).
	Progress func(Progress)
	// Warn, if set, is told about each entry a tar archive cannot hold (a
	// socket), which the archive leaves out.
	Warn func(msg string)
}

// ExportStats summarise an export.
type ExportStats struct {
	Entries uint64 // tar entries written, the root directory included
	Bytes   uint64 // archive bytes written
	Skipped uint64 // sockets left out
}

// Export writes snapshot id of store to w as a tar archive (PAX format),
// in tree order (depth first, names in byte order), the root directory
// first as "./". See the package documentation for what it keeps. The
// archive's bytes depend only on the snapshot.
func Export(ctx context.Context, store *chunkstore.Store, id chunkstore.ID, w io.Writer, opts ExportOptions) (ExportStats, error) {
	snap, err := store.Snapshot(ctx, id)
	if err != nil {
		return ExportStats{}, err
	}
	e := &exporter{store: store, opts: opts, links: make(map[uint64]string)}
	e.out = &countingWriter{w: w, e: e}
	e.tw = tar.NewWriter(e.out)
	ra := snap.RootAttr
	root := &chunkstore.Entry{Type: chunkstore.TypeDir, Mode: ra.Mode, UID: ra.UID, GID: ra.GID,
		Atime: ra.Atime, Mtime: ra.Mtime, Ctime: ra.Ctime, Xattrs: ra.Xattrs}
	if err := e.entry(ctx, root, "."); err != nil {
		return e.stats, err
	}
	if err := e.dir(ctx, snap.Root, "./"); err != nil {
		return e.stats, err
	}
	if err := e.tw.Close(); err != nil {
		return e.stats, err
	}
	return e.stats, nil
}

type exporter struct {
	store *chunkstore.Store
	opts  ExportOptions
	out   *countingWriter
	tw    *tar.Writer
	links map[uint64]string // inode -> first path, for hardlinked inodes
	stats ExportStats
}

// countingWriter counts the archive's bytes and reports progress.
type countingWriter struct {
	w io.Writer
	e *exporter
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.e.stats.Bytes += uint64(n)
	c.e.progress()
	return n, err
}

func (e *exporter) progress() {
	if e.opts.Progress != nil {
		e.opts.Progress(Progress{Entries: e.stats.Entries, Bytes: e.stats.Bytes})
	}
}

func (e *exporter) dir(ctx context.Context, id chunkstore.ID, prefix string) error {
	tree, err := e.store.Tree(ctx, id)
	if err != nil {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	for i := range tree.Entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		ent := &tree.Entries[i]
		name := prefix + ent.Name
		if err := e.entry(ctx, ent, name); err != nil {
			return err
		}
		if ent.Type == chunkstore.TypeDir {
			if err := e.dir(ctx, ent.Subtree, name+"/"); err != nil {
				return err
			}
		}
	}
	return nil
}

// entry writes one tree entry (and a regular file's content) as name.
func (e *exporter) entry(ctx context.Context, ent *chunkstore.Entry, name string) error {
	hdr := &tar.Header{
		Name: name, Mode: int64(ent.Mode), Uid: int(ent.UID), Gid: int(ent.GID),
		ModTime: time.Unix(0, ent.Mtime), AccessTime: time.Unix(0, ent.Atime), ChangeTime: time.Unix(0, ent.Ctime),
		Format: tar.FormatPAX,
	}
	for _, x := range ent.Xattrs {
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = make(map[string]string, len(ent.Xattrs))
		}
		hdr.PAXRecords["SCHILY.xattr."+x.Name] = string(x.Value)
	}
	if ent.Type == chunkstore.TypeSocket {
		e.stats.Skipped++
		if e.opts.Warn != nil {
			e.opts.Warn(fmt.Sprintf("%s: a socket; tar archives cannot hold sockets, left out", name))
		}
		return nil
	}
	if ent.Nlink > 1 && ent.Type != chunkstore.TypeDir {
		if first, ok := e.links[ent.Ino]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			hdr.PAXRecords = nil // the first name carries the inode's xattrs
			return e.header(hdr)
		}
		e.links[ent.Ino] = name
	}
	switch ent.Type {
	case chunkstore.TypeDir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
	case chunkstore.TypeSymlink:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, ent.Target
	case chunkstore.TypeFIFO:
		hdr.Typeflag = tar.TypeFifo
	case chunkstore.TypeCharDev, chunkstore.TypeBlockDev:
		hdr.Typeflag = tar.TypeChar
		if ent.Type == chunkstore.TypeBlockDev {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(devMajor(ent.Rdev)), int64(devMinor(ent.Rdev))
	case chunkstore.TypeRegular:
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(ent.Size)
		return e.file(ctx, ent, hdr)
	default:
		return fmt.Errorf("%s: %w: unknown entry type %d", name, chunkstore.ErrCorrupt, ent.Type)
	}
	return e.header(hdr)
}

func (e *exporter) header(hdr *tar.Header) error {
	if err := e.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	e.stats.Entries++
	e.progress()
	return nil
}

// file writes a regular file: a sparse entry when it has holes.
func (e *exporter) file(ctx context.Context, ent *chunkstore.Entry, hdr *tar.Header) error {
	if len(ent.Inline) > 0 || ent.Size == 0 {
		if err := e.header(hdr); err != nil {
			return err
		}
		_, err := e.tw.Write(ent.Inline)
		return err
	}
	fr, err := e.store.OpenFile(ctx, chunkstore.FileContent{Size: ent.Size, Chunks: ent.Chunks, ChunkLists: ent.ChunkLists})
	if err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	var frags []tarfmt.Fragment
	var data uint64
	for off := uint64(0); ; {
		d, ok := fr.Seek(off, false)
		if !ok {
			break
		}
		h, _ := fr.Seek(d, true)
		frags = append(frags, tarfmt.Fragment{Offset: int64(d), Length: int64(h - d)})
		data += h - d
		off = h
	}
	if data == ent.Size { // no holes
		if err := e.header(hdr); err != nil {
			return err
		}
		if _, err := fr.WriteTo(e.tw); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		return nil
	}
	if err := e.tw.Flush(); err != nil {
		return err
	}
	if err := tarfmt.WriteSparse(e.out, hdr, frags, fr); err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	e.stats.Entries++
	e.progress()
	return nil
}

// devMajor and devMinor split a Linux device number (st_rdev, as trees
// store it) as gnu_dev_major and gnu_dev_minor do.
func devMajor(dev uint64) uint32 { return uint32((dev>>8)&0xfff | (dev>>32)&^0xfff) }
func devMinor(dev uint64) uint32 { return uint32(dev&0xff | (dev>>12)&^0xff) }

// mkdev is the inverse of devMajor and devMinor (gnu_dev_makedev).
func mkdev(major, minor uint32) uint64 {
	ma, mi := uint64(major), uint64(minor)
	return (ma&0xfff)<<8 | (ma&^0xfff)<<32 | mi&0xff | (mi&^0xff)<<12
}
