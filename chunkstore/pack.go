package chunkstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Pack format, version 1. A pack is one backend object holding many blobs:
//
//	header   8 bytes   "CAIRNPK" followed by the format version byte (1)
//	blobs    the stored (possibly compressed) bytes of each blob, back to back
//	trailer  count entries of 48 bytes each, in blob order:
//	           id [32]byte | kind u8 | compression u8 | reserved u16 (0)
//	           | offset u32 | stored length u32 | raw length u32   (little endian)
//	footer   16 bytes: count u32 | CRC-32C of the trailer u32 | "CAIRNPKT"
//
// The index makes the trailer redundant for normal reads; it lets a pack be
// checked and re-indexed on its own (fsck, recovery of packs whose index file
// was never written). A pack is named by the keyed hash of its trailer plus
// footer, which commits to every blob's ID and position, and is stored at
// packs/<first two hex digits>/<hex ID>.
const (
	packVersion     = 1
	packHeaderSize  = 8
	packEntrySize   = 48
	packFooterSize  = 16
	packFooterMagic = "CAIRNPKT"
	packHeaderMagic = "CAIRNPK"
	// maxPackEntries bounds the trailer a reader will accept.
	maxPackEntries = 1 << 24
)

// Compression of one stored blob.
const (
	compNone uint8 = 0
	compZstd uint8 = 1
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// packEntry describes one blob in a pack.
type packEntry struct {
	ID     ID
	Kind   BlobKind
	Comp   uint8
	Offset uint32
	Stored uint32
	Raw    uint32
}

func packKey(id ID) string {
	s := id.String()
	return "packs/" + s[:2] + "/" + s
}

func packHeader() []byte {
	return append([]byte(packHeaderMagic), packVersion)
}

// appendPackTrailer appends the trailer and footer for entries to buf.
func appendPackTrailer(buf []byte, entries []packEntry) []byte {
	start := len(buf)
	for _, e := range entries {
		buf = append(buf, e.ID[:]...)
		buf = append(buf, byte(e.Kind), e.Comp, 0, 0)
		buf = binary.LittleEndian.AppendUint32(buf, e.Offset)
		buf = binary.LittleEndian.AppendUint32(buf, e.Stored)
		buf = binary.LittleEndian.AppendUint32(buf, e.Raw)
	}
	sum := crc32.Checksum(buf[start:], crc32c)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(entries)))
	buf = binary.LittleEndian.AppendUint32(buf, sum)
	return append(buf, packFooterMagic...)
}

// packTrailerLen parses a pack's footer (its last 16 bytes) and returns how
// many bytes the trailer before it occupies.
func packTrailerLen(footer []byte, packSize int64) (int, error) {
	if len(footer) != packFooterSize || string(footer[8:]) != packFooterMagic {
		return 0, fmt.Errorf("%w: pack footer magic missing (truncated pack?)", ErrCorrupt)
	}
	count := binary.LittleEndian.Uint32(footer)
	if count > maxPackEntries {
		return 0, fmt.Errorf("%w: pack footer claims %d entries", ErrCorrupt, count)
	}
	n := int64(count) * packEntrySize
	if n+packHeaderSize+packFooterSize > packSize {
		return 0, fmt.Errorf("%w: pack trailer of %d entries does not fit in %d bytes", ErrCorrupt, count, packSize)
	}
	return int(n), nil
}

// decodePackTrailer parses a pack's trailer plus footer (the last
// packTrailerLen+16 bytes of a pack of packSize bytes) and checks every entry
// lies within the blob area.
func decodePackTrailer(tail []byte, packSize int64) ([]packEntry, error) {
	if len(tail) < packFooterSize {
		return nil, fmt.Errorf("%w: pack shorter than its footer", ErrCorrupt)
	}
	footer := tail[len(tail)-packFooterSize:]
	n, err := packTrailerLen(footer, packSize)
	if err != nil {
		return nil, err
	}
	if len(tail) != n+packFooterSize {
		return nil, fmt.Errorf("%w: pack trailer is %d bytes, footer says %d", ErrCorrupt, len(tail)-packFooterSize, n)
	}
	trailer := tail[:n]
	if got, want := crc32.Checksum(trailer, crc32c), binary.LittleEndian.Uint32(footer[4:]); got != want {
		return nil, fmt.Errorf("%w: pack trailer checksum mismatch", ErrCorrupt)
	}
	blobEnd := packSize - int64(n) - packFooterSize
	entries := make([]packEntry, n/packEntrySize)
	next := int64(packHeaderSize)
	for i := range entries {
		b := trailer[i*packEntrySize:]
		e := &entries[i]
		copy(e.ID[:], b[:32])
		e.Kind, e.Comp = BlobKind(b[32]), b[33]
		e.Offset = binary.LittleEndian.Uint32(b[36:])
		e.Stored = binary.LittleEndian.Uint32(b[40:])
		e.Raw = binary.LittleEndian.Uint32(b[44:])
		if err := e.check(); err != nil {
			return nil, fmt.Errorf("pack entry %d: %w", i, err)
		}
		if b[34] != 0 || b[35] != 0 || int64(e.Offset) != next || int64(e.Offset)+int64(e.Stored) > blobEnd {
			return nil, fmt.Errorf("%w: pack entry %d (blob %s) lies outside the blob area or out of order", ErrCorrupt, i, e.ID.Short())
		}
		next += int64(e.Stored)
	}
	if next != blobEnd {
		return nil, fmt.Errorf("%w: pack has %d bytes not covered by its trailer", ErrCorrupt, blobEnd-next)
	}
	return entries, nil
}

func (e *packEntry) check() error {
	if !e.Kind.Valid() {
		return fmt.Errorf("%w: blob %s has unknown kind %d", ErrCorrupt, e.ID.Short(), e.Kind)
	}
	switch e.Comp {
	case compNone:
		if e.Stored != e.Raw {
			return fmt.Errorf("%w: raw blob %s stored as %d bytes, raw length %d", ErrCorrupt, e.ID.Short(), e.Stored, e.Raw)
		}
	case compZstd:
	default:
		return fmt.Errorf("%w: blob %s has unknown compression %d", ErrCorrupt, e.ID.Short(), e.Comp)
	}
	return nil
}
