package chunkstore

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// cursor reads the canonical binary encodings of trees and chunk lists: a
// position in a byte slice whose first error sticks. After an error every
// read returns a zero value, so a decoder can read a whole record and check
// c.err once. uvarint keeps the common case (a one-byte varint) on a short
// path.
//
// Canonical means a value has exactly one encoding: varints must be minimal
// (binary.AppendUvarint's output and nothing longer).
type cursor struct {
	buf  []byte
	off  int
	err  error
	what string // "tree", "chunk list": for messages
}

// fail records the first error, wrapped in ErrCorrupt, and moves the cursor
// to the end so that every later read fails fast.
func (c *cursor) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s: at byte %d: %s", ErrCorrupt, c.what, c.off, fmt.Sprintf(format, args...))
	}
	c.off = len(c.buf)
}

// header checks magic and version. Version 0 never existed: it is corruption.
// A higher version is ErrVersion.
func (c *cursor) header(magic string, version byte) {
	if len(c.buf) < len(magic)+1 || string(c.buf[:len(magic)]) != magic {
		c.fail("not a %s (bad magic)", c.what)
		return
	}
	v := c.buf[len(magic)]
	c.off = len(magic) + 1
	switch {
	case v == version:
	case v == 0:
		c.fail("format version 0")
	default:
		c.err = fmt.Errorf("%w: %s has format version %d, this cairn reads version %d: written by a newer cairn; upgrade cairn",
			ErrVersion, c.what, v, version)
		c.off = len(c.buf)
	}
}

// uvarint reads a minimal unsigned varint.
func (c *cursor) uvarint(field string) uint64 {
	if c.off < len(c.buf) && c.buf[c.off] < 0x80 {
		v := c.buf[c.off]
		c.off++
		return uint64(v)
	}
	return c.uvarintSlow(field)
}

func (c *cursor) uvarintSlow(field string) uint64 {
	var v uint64
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if c.off+i >= len(c.buf) {
			c.fail("%s: truncated varint", field)
			return 0
		}
		b := c.buf[c.off+i]
		if b < 0x80 {
			switch {
			case i == binary.MaxVarintLen64-1 && b > 1:
				c.fail("%s: varint overflows 64 bits", field)
				return 0
			case b == 0 && i > 0: // a final 0x00 byte adds nothing
				c.fail("%s: non-minimal varint", field)
				return 0
			}
			c.off += i + 1
			return v | uint64(b)<<(7*i)
		}
		v |= uint64(b&0x7f) << (7 * i)
	}
	c.fail("%s: varint overflows 64 bits", field)
	return 0
}

// varint reads a minimal zigzag-encoded signed varint (binary.AppendVarint).
func (c *cursor) varint(field string) int64 {
	u := c.uvarint(field)
	return int64(u>>1) ^ -int64(u&1)
}

// u32 reads a uvarint that must fit in 32 bits.
func (c *cursor) u32(field string) uint32 {
	v := c.uvarint(field)
	if v > 1<<32-1 {
		c.fail("%s: %d does not fit in 32 bits", field, v)
		return 0
	}
	return uint32(v)
}

// count reads a uvarint count of items that each take at least minSize
// bytes, refusing counts the remaining input cannot hold, so corrupt input
// cannot make the decoder allocate without bound.
func (c *cursor) count(field string, minSize int) int {
	v := c.uvarint(field)
	if rem := uint64(len(c.buf) - c.off); v > rem/uint64(minSize) {
		c.fail("%s: count %d exceeds the remaining %d bytes", field, v, rem)
		return 0
	}
	return int(v)
}

// byte1 reads one byte.
func (c *cursor) byte1(field string) byte {
	if c.off < len(c.buf) {
		b := c.buf[c.off]
		c.off++
		return b
	}
	c.fail("%s: truncated", field)
	return 0
}

// span reads n bytes and returns their offset in c.buf, or -1.
func (c *cursor) span(field string, n uint64) int {
	if n > uint64(len(c.buf)-c.off) {
		c.fail("%s: length %d exceeds the remaining %d bytes", field, n, len(c.buf)-c.off)
		return -1
	}
	off := c.off
	c.off += int(n)
	return off
}

// id reads a 32-byte ID.
func (c *cursor) id(field string) (id ID) {
	if len(c.buf)-c.off >= IDSize {
		copy(id[:], c.buf[c.off:])
		c.off += IDSize
		return id
	}
	c.fail("%s: truncated ID", field)
	return id
}

// end refuses trailing bytes.
func (c *cursor) end() {
	if c.err == nil && c.off != len(c.buf) {
		c.fail("%d trailing bytes", len(c.buf)-c.off)
	}
}

// varintSize is the encoded length of v as a uvarint.
func varintSize(v uint64) int {
	return (bits.Len64(v|1) + 6) / 7
}

// addSize adds b to a, reporting overflow.
func addSize(a, b uint64) (uint64, bool) {
	s, carry := bits.Add64(a, b, 0)
	return s, carry == 0
}
