package tarfmt

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
)

// Reader reads a tar archive entry by entry, as tar.Reader does, and reads
// GNU sparse entries without materialising their holes. Not safe for
// concurrent use.
type Reader struct {
	t   tap
	tr  *tar.Reader
	hdr *tar.Header
	sp  *sparseEntry // the current entry's map, when it is sparse
	pos int64        // logical read position in the current entry
	err error        // sticky: the stream is unusable after an error
}

// sparseEntry is the state of a sparse entry whose stored data this package
// reads itself.
type sparseEntry struct {
	frags []Fragment // non-empty, sorted, within size
	size  int64      // logical size
	data  int64      // stored bytes: the sum of the fragments' lengths
	left  int64      // stored bytes not read from the stream yet
	fi    int        // first fragment that ends after pos
}

// NewReader returns a Reader of the tar archive in r.
func NewReader(r io.Reader) *Reader {
	rd := &Reader{t: tap{r: r}}
	rd.tr = tar.NewReader(&rd.t)
	return rd
}

// Offset is the number of bytes of the archive read so far, for error
// messages.
func (r *Reader) Offset() int64 { return r.t.off }

// Next advances to the next entry, skipping what is left of the current
// one, and returns its header, as tar.Reader.Next does (io.EOF at the end).
// A sparse entry's header has its real name and logical size.
func (r *Reader) Next() (*tar.Header, error) {
	if r.err != nil {
		return nil, r.err
	}
	if err := r.finish(); err != nil {
		r.err = err
		return nil, err
	}
	start := r.t.off
	r.t.buf, r.t.record = r.t.buf[:0], true
	hdr, err := r.tr.Next()
	r.t.record = false
	if err != nil {
		r.err = err
		return nil, err
	}
	if r.t.credit != 0 {
		r.err = fmt.Errorf("tarfmt: internal error: %d bytes of the previous entry were not skipped", r.t.credit)
		return nil, r.err
	}
	r.hdr, r.pos, r.sp = hdr, 0, nil
	// Everything tar.Reader read in Next: the previous entry's padding,
	// then this entry's header blocks (and a sparse map).
	sp, err := sparseMap(hdr, r.t.buf[min(int64(len(r.t.buf)), padding(start)):])
	if err != nil {
		r.err = fmt.Errorf("%w: entry %q: %v", tar.ErrHeader, hdr.Name, err)
		return nil, r.err
	}
	r.sp = sp
	return hdr, nil
}

// Fragments returns the data fragments of the current entry and true when
// it is a sparse entry; everything else in the file is a hole.
func (r *Reader) Fragments() ([]Fragment, bool) {
	if r.sp == nil {
		return nil, false
	}
	return r.sp.frags, true
}

// Read reads the current entry's content, holes as zeros (without reading
// them from the archive).
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.hdr == nil {
		return 0, io.EOF
	}
	if r.sp == nil {
		n, err := r.tr.Read(p)
		r.pos += int64(n)
		if err != nil && err != io.EOF {
			r.err = err
		}
		return n, err
	}
	return r.readSparse(p)
}

// ReadAt reads the current entry's content at off. The archive is a
// stream: off must not be before the end of the previous read (bytes in
// between are skipped; holes cost nothing). That is how
// chunkstore.Store.PutSparseFile reads.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < r.pos {
		return 0, fmt.Errorf("tarfmt: read at %d after reading up to %d: the archive is read as a stream", off, r.pos)
	}
	if err := r.skip(off - r.pos); err != nil {
		return 0, err
	}
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (r *Reader) readSparse(p []byte) (int, error) {
	sp := r.sp
	if r.pos >= sp.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.pos < sp.size {
		for sp.fi < len(sp.frags) && sp.frags[sp.fi].End() <= r.pos {
			sp.fi++
		}
		want := int64(len(p) - n)
		if sp.fi == len(sp.frags) || r.pos < sp.frags[sp.fi].Offset {
			end := sp.size
			if sp.fi < len(sp.frags) {
				end = sp.frags[sp.fi].Offset
			}
			k := int(min(want, end-r.pos))
			clear(p[n : n+k])
			n += k
			r.pos += int64(k)
			continue
		}
		k := int(min(want, sp.frags[sp.fi].End()-r.pos))
		m, err := io.ReadFull(&r.t, p[n:n+k])
		n += m
		r.pos += int64(m)
		sp.left -= int64(m)
		if err != nil {
			r.err = unexpected(err)
			return n, r.err
		}
	}
	return n, nil
}

// skip moves the read position n bytes on.
func (r *Reader) skip(n int64) error {
	if n == 0 {
		return nil
	}
	if r.err != nil {
		return r.err
	}
	if r.sp == nil {
		m, err := io.CopyN(io.Discard, r.tr, n)
		r.pos += m
		if err != nil && err != io.EOF {
			r.err = err
		}
		return err
	}
	sp, to := r.sp, min(r.pos+n, r.sp.size)
	for r.pos < to {
		for sp.fi < len(sp.frags) && sp.frags[sp.fi].End() <= r.pos {
			sp.fi++
		}
		if sp.fi == len(sp.frags) || r.pos < sp.frags[sp.fi].Offset {
			end := sp.size
			if sp.fi < len(sp.frags) {
				end = sp.frags[sp.fi].Offset
			}
			r.pos = min(to, end)
			continue
		}
		k := min(to, sp.frags[sp.fi].End()) - r.pos
		m, err := io.CopyN(io.Discard, &r.t, k)
		r.pos += m
		sp.left -= m
		if err != nil {
			r.err = unexpected(err)
			return r.err
		}
	}
	return nil
}

// finish reads what is left of the current entry, so that the next header
// starts at the block boundary after it (Next relies on that), and
// arranges for tar.Reader to skip a sparse entry's stored data, which this
// package has read itself.
func (r *Reader) finish() error {
	if r.hdr == nil {
		return nil
	}
	defer func() { r.hdr, r.sp = nil, nil }()
	if sp := r.sp; sp != nil {
		if _, err := io.CopyN(io.Discard, &r.t, sp.left); err != nil {
			return unexpected(err)
		}
		r.t.credit = sp.data
		return nil
	}
	_, err := io.Copy(io.Discard, r.tr)
	return err
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// tap is the stream under tar.Reader. It counts the bytes read, records
// them while Next runs (so that sparse maps can be parsed from the header
// blocks), and answers tar.Reader's skip of a sparse entry's stored data
// (credit bytes, which Reader has already read from the stream) without
// reading the stream again. tar.Reader skips by reading, since tap is not an
// io.Seeker, and what it skips it never looks at.
type tap struct {
	r      io.Reader
	off    int64 // bytes read from r
	record bool
	buf    []byte
	credit int64
}

func (t *tap) Read(p []byte) (int, error) {
	if t.credit > 0 {
		n := int(min(int64(len(p)), t.credit))
		t.credit -= int64(n)
		return n, nil
	}
	n, err := t.r.Read(p)
	t.off += int64(n)
	if t.record {
		t.buf = append(t.buf, p[:n]...)
	}
	return n, err
}
