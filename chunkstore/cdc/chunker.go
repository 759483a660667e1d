package cdc

import "io"

// bigBufSize is the buffer size a Chunker grows to on a long stream. A larger
// buffer means fewer, larger reads and fewer copies of the unconsumed tail
// to the front of the buffer; 4 MiB still fits in L2/L3.
const bigBufSize = 4 << 20

// maxEmptyReads is how many consecutive (0, nil) reads a Chunker tolerates
// before it gives up with io.ErrNoProgress, as bufio does.
const maxEmptyReads = 100

// Chunk is one content-defined chunk of a stream.
type Chunk struct {
	// Offset is the position of the chunk's first byte in the stream.
	Offset int64
	// Data is the chunk's content. It aliases the Chunker's buffer and is
	// valid only until the next call to Next or Reset.
	Data []byte
}

// Chunker splits a stream into FastCDC chunks. Boundaries depend only on the
// content and the Cutter's Params, never on how the reader splits its reads.
// A Chunker is not safe for concurrent use; the Cutter it uses may be shared.
type Chunker struct {
	c     *Cutter
	r     io.Reader
	buf   []byte
	start int   // first unconsumed byte in buf
	end   int   // end of valid data in buf
	off   int64 // stream offset of buf[start]
	eof   bool  // r returned io.EOF
	err   error // sticky error from r, or io.EOF once all chunks are out
}

// NewChunker returns a Chunker reading r. Its buffer is allocated on the
// first call to Next with 2*Max bytes, grows once to max(4 MiB, 2*Max) if a
// stream is longer than that, and is kept across Reset.
func NewChunker(r io.Reader, c *Cutter) *Chunker {
	return &Chunker{c: c, r: r}
}

// Reset makes ch read a new stream from r, from offset 0, keeping its buffer.
func (ch *Chunker) Reset(r io.Reader) {
	ch.r = r
	ch.start, ch.end, ch.off = 0, 0, 0
	ch.eof = false
	ch.err = nil
}

// Next returns the next chunk. After the last chunk it returns io.EOF; an
// empty stream yields no chunk, only io.EOF. A read error other than io.EOF
// is returned as is, and again by every later call.
//
// Every chunk but the last is between Min and Max bytes long; the last is
// between 1 and Max bytes.
func (ch *Chunker) Next() (Chunk, error) {
	if ch.err != nil {
		return Chunk{}, ch.err
	}
	if ch.end-ch.start < ch.c.max && !ch.eof {
		if err := ch.fill(); err != nil {
			ch.err = err
			return Chunk{}, err
		}
	}
	avail := ch.buf[ch.start:ch.end]
	if len(avail) == 0 {
		// Only at EOF: fill returns with at least Max bytes otherwise.
		ch.err = io.EOF
		return Chunk{}, io.EOF
	}
	// Either avail holds at least Max bytes, so Cut sees everything it may
	// look at, or the stream ended, so avail is all that is left: the cut
	// is the same as on the whole stream.
	n := ch.c.Cut(avail)
	chunk := Chunk{Offset: ch.off, Data: avail[:n:n]}
	ch.start += n
	ch.off += int64(n)
	return chunk, nil
}

// fill reads until the buffer holds at least Max unconsumed bytes or the
// stream ends.
func (ch *Chunker) fill() error {
	if ch.buf == nil {
		// Small files, the common case, never need more.
		ch.buf = make([]byte, 2*ch.c.max)
	}
	if len(ch.buf)-ch.start < ch.c.max {
		// Not enough room after start: move the unconsumed tail to the
		// front, into a bigger buffer if this stream outgrew the first one.
		buf := ch.buf
		if big := max(bigBufSize, 2*ch.c.max); len(buf) < big {
			buf = make([]byte, big)
		}
		ch.end = copy(buf, ch.buf[ch.start:ch.end])
		ch.start = 0
		ch.buf = buf
	}
	empty := 0
	for ch.end-ch.start < ch.c.max {
		n, err := ch.r.Read(ch.buf[ch.end:])
		if n < 0 || n > len(ch.buf)-ch.end {
			return errBadRead
		}
		ch.end += n
		switch {
		case err == io.EOF:
			ch.eof = true
			return nil
		case err != nil:
			return err
		case n == 0:
			empty++
			if empty >= maxEmptyReads {
				return io.ErrNoProgress
			}
		default:
			empty = 0
		}
	}
	return nil
}
