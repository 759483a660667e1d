package chunkstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// Index file format, version 1. One index file is written per flush and
// lists the blobs of the packs that flush wrote:
//
//	header   8 bytes  "CAIRNIX" followed by the format version byte (1)
//	uvarint  number of superseded index files (0 for now; GC will use it),
//	         followed by their 32-byte IDs
//	uvarint  number of packs, then for each pack:
//	           pack ID [32]byte | uvarint entry count | entries, each:
//	             blob ID [32]byte | kind u8 | compression u8
//	             | uvarint offset | uvarint stored length | uvarint raw length
//
// An index file is named by the keyed hash of its bytes (index/<hex ID>), so
// it is verified whenever it is read, and an index copied from a store with
// another key is refused. Varints must be minimal; trailing bytes are refused.
const (
	indexVersion     = 1
	indexHeaderMagic = "CAIRNIX"
)

func indexKey(id ID) string { return "index/" + id.String() }

// indexPack is one pack's entries in an index file.
type indexPack struct {
	ID      ID
	Entries []packEntry
}

// indexFile is a decoded index file.
type indexFile struct {
	Supersedes []ID
	Packs      []indexPack
}

func encodeIndex(f *indexFile) []byte {
	n := 16 + 40*len(f.Supersedes)
	for _, p := range f.Packs {
		n += 40 + len(p.Entries)*48
	}
	buf := make([]byte, 0, n)
	buf = append(buf, indexHeaderMagic...)
	buf = append(buf, indexVersion)
	buf = binary.AppendUvarint(buf, uint64(len(f.Supersedes)))
	for _, id := range f.Supersedes {
		buf = append(buf, id[:]...)
	}
	buf = binary.AppendUvarint(buf, uint64(len(f.Packs)))
	for _, p := range f.Packs {
		buf = append(buf, p.ID[:]...)
		buf = binary.AppendUvarint(buf, uint64(len(p.Entries)))
		for _, e := range p.Entries {
			buf = append(buf, e.ID[:]...)
			buf = append(buf, byte(e.Kind), e.Comp)
			buf = binary.AppendUvarint(buf, uint64(e.Offset))
			buf = binary.AppendUvarint(buf, uint64(e.Stored))
			buf = binary.AppendUvarint(buf, uint64(e.Raw))
		}
	}
	return buf
}

func decodeIndex(data []byte) (*indexFile, error) {
	c := &cursor{buf: data, what: "index file"}
	c.header(indexHeaderMagic, indexVersion)
	f := &indexFile{}
	for range c.count("superseded count", IDSize) {
		f.Supersedes = append(f.Supersedes, c.id("superseded index"))
	}
	np := c.count("pack count", IDSize+1)
	if c.err == nil {
		f.Packs = make([]indexPack, 0, np)
	}
	for range np {
		p := indexPack{ID: c.id("pack ID")}
		ne := c.count("entry count", IDSize+5)
		if c.err != nil {
			break
		}
		p.Entries = make([]packEntry, ne)
		next := uint64(packHeaderSize)
		for i := range p.Entries {
			e := &p.Entries[i]
			e.ID = c.id("blob ID")
			e.Kind = BlobKind(c.byte1("kind"))
			e.Comp = c.byte1("compression")
			e.Offset = c.u32("offset")
			e.Stored = c.u32("stored length")
			e.Raw = c.u32("raw length")
			if c.err != nil {
				break
			}
			if err := e.check(); err != nil {
				return nil, fmt.Errorf("index file: %w", err)
			}
			if uint64(e.Offset) != next {
				c.fail("pack %s: blob %s at offset %d, expected %d", p.ID.Short(), e.ID.Short(), e.Offset, next)
			}
			next += uint64(e.Stored)
		}
		f.Packs = append(f.Packs, p)
	}
	c.end()
	if c.err != nil {
		return nil, c.err
	}
	return f, nil
}

// location is where one blob lives: 20 bytes, so that a million blobs fit in
// well under the 200 MB the store may spend on its index.
type location struct {
	pack   uint32 // position in memIndex.packs
	offset uint32
	stored uint32
	raw    uint32
	kind   BlobKind
	comp   uint8
}

// memIndex is the in-memory index: blob ID -> location, with pack IDs
// interned so each entry stays small. Safe for concurrent use.
type memIndex struct {
	mu      sync.RWMutex
	packs   []ID
	trailer []packExtent // per pack, where its trailer lies (coalesced reads)
	packNum map[ID]uint32
	blobs   *idTable
	stored  uint64 // sum of stored bytes, for stats
}

// packExtent locates a pack's trailer: it starts where the blob area ends
// and holds count entries. 8 bytes per pack (a pack holds hundreds to
// thousands of blobs), so the index's cost per blob does not change. The
// trailer lists a pack's blobs in offset order, which the ID table does not
// keep: reads fetch it to coalesce neighbouring blobs into one GET.
type packExtent struct {
	end   uint32 // end of the blob area: the trailer's offset
	count uint32 // entries in the trailer
}

// len is the trailer's length, footer included.
func (e packExtent) len() int64 { return int64(e.count)*packEntrySize + packFooterSize }

func newMemIndex() *memIndex {
	return &memIndex{packNum: make(map[ID]uint32), blobs: newIDTable(0)}
}

// reserve sizes an empty index for about n blobs, so that loading does not
// grow the map step by step (each step leaves the old table as garbage).
func (x *memIndex) reserve(n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.blobs.len() == 0 && n > 0 {
		x.blobs = newIDTable(n)
	}
}

// addPack records a pack's entries. Blobs already present elsewhere keep
// their first location (duplicates across packs are harmless and left to GC).
func (x *memIndex) addPack(packID ID, entries []packEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	num, ok := x.packNum[packID]
	if !ok {
		num = uint32(len(x.packs))
		x.packs = append(x.packs, packID)
		// Entries are the pack's whole trailer in offset order (index
		// files and uploads list every entry, checked contiguous).
		var ext packExtent
		if n := len(entries); n > 0 {
			if end := uint64(entries[n-1].Offset) + uint64(entries[n-1].Stored); end <= math.MaxUint32 {
				ext = packExtent{end: uint32(end), count: uint32(n)}
			}
		}
		x.trailer = append(x.trailer, ext)
		x.packNum[packID] = num
	}
	for _, e := range entries {
		if x.blobs.insert(e.ID, location{pack: num, offset: e.Offset, stored: e.Stored, raw: e.Raw, kind: e.Kind, comp: e.Comp}) {
			x.stored += uint64(e.Stored)
		}
	}
}

func (x *memIndex) lookup(id ID) (packID ID, loc location, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	loc, ok = x.blobs.get(id)
	if ok {
		packID = x.packs[loc.pack]
	}
	return packID, loc, ok
}

// pack returns the ID of pack number num and where its trailer lies.
func (x *memIndex) pack(num uint32) (ID, packExtent) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.packs[num], x.trailer[num]
}

func (x *memIndex) has(id ID) bool {
	x.mu.RLock()
	_, ok := x.blobs.get(id)
	x.mu.RUnlock()
	return ok
}

func (x *memIndex) counts() (blobs, packs int, stored uint64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.blobs.len(), len(x.packs), x.stored
}
