package model

import (
	"maps"
	"slices"

	"github.com/cairnfs/cairn/journal"
)

const pageSize = 4096

// fileData is a sparse file's bytes: pages never written read as zeros.
// Invariant: no byte at or beyond the file's size is non-zero, so
// extending a file exposes zeros.
type fileData struct {
	pages map[int64]*[pageSize]byte // by page index
}

func (d *fileData) clone() *fileData {
	if d == nil {
		return nil
	}
	c := &fileData{pages: maps.Clone(d.pages)}
	for k, p := range c.pages {
		cp := *p
		c.pages[k] = &cp
	}
	return c
}

// readAt fills p with the bytes at off (zeros for holes).
func (d *fileData) readAt(p []byte, off int64) {
	for len(p) > 0 {
		idx, in := off/pageSize, off%pageSize
		n := min(int64(len(p)), pageSize-in)
		if pg, ok := d.pages[idx]; ok {
			copy(p[:n], pg[in:in+n])
		} else {
			clear(p[:n])
		}
		p, off = p[n:], off+n
	}
}

// writeAt stores p at off.
func (d *fileData) writeAt(p []byte, off int64) {
	if d.pages == nil {
		d.pages = map[int64]*[pageSize]byte{}
	}
	for len(p) > 0 {
		idx, in := off/pageSize, off%pageSize
		n := min(int64(len(p)), pageSize-in)
		pg, ok := d.pages[idx]
		if !ok {
			pg = new([pageSize]byte)
			d.pages[idx] = pg
		}
		copy(pg[in:in+n], p[:n])
		p, off = p[n:], off+n
	}
}

// zero clears the bytes in [off, end). It visits stored pages only, so
// huge ranges are cheap.
func (d *fileData) zero(off, end int64) {
	if off >= end {
		return
	}
	for idx, pg := range d.pages {
		lo, hi := max(off, idx*pageSize), min(end, (idx+1)*pageSize)
		switch {
		case lo >= hi:
		case hi-lo == pageSize:
			delete(d.pages, idx)
		default:
			clear(pg[lo-idx*pageSize : hi-idx*pageSize])
		}
	}
}

// truncate changes the size from oldSize to size, dropping the bytes
// beyond a smaller size.
func (d *fileData) truncate(oldSize, size int64) {
	if size < oldSize {
		d.zero(size, oldSize)
	}
}

// DataPages returns the offsets of the pages of a regular file that hold
// data, sorted, and the page size: what a test needs to compare a large
// sparse file without reading all of it.
func (m *Model) DataPages(ino journal.Ino) ([]int64, int64) {
	n, ok := m.inodes[ino]
	if !ok || n.data == nil {
		return nil, pageSize
	}
	offs := make([]int64, 0, len(n.data.pages))
	for k := range n.data.pages {
		offs = append(offs, k*pageSize)
	}
	slices.Sort(offs)
	return offs, pageSize
}
