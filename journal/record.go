package journal

import (
	"encoding/binary"
	"fmt"

	"github.com/cairnfs/cairn/chunkstore"
)

// inode is the journal's record of one inode, stored under its key
// (keys.go). The encoding is versioned; decodeInode refuses what it does not
// know.
type inode struct {
	Attr
	Parent Ino // directories: the parent directory (the root: itself)

	// Directories.
	Tree   chunkstore.ID // the directory's tree in the base snapshot (zero: none)
	Loaded bool          // entries copied from Tree into dentries

	// Symlinks.
	Target string

	// Regular files. Content is the last committed content (from the base
	// snapshot or the last Snapshot); while Staged, the staging file holds
	// the current bytes and Content may be stale.
	Inline     []byte
	Chunks     []chunkstore.ChunkRef
	ChunkLists []chunkstore.ChunkListRef
	Staged     bool

	HasXattrs bool // the inode may have xattrs (set when one is set)
}

const (
	recordVersion = 1
	flagLoaded    = 1 << 0
	flagStaged    = 1 << 1
	flagXattrs    = 1 << 2
)

// Record layout, version 1 (little endian, uvarints minimal):
//
//	version u8 | type u8 | flags u8 | mode uv | uid uv | gid uv | size uv | nlink uv
//	| rdev uv | atime v | mtime v | ctime v | parent uv
//	| dir: tree [32]  | symlink: target (uv len + bytes)
//	| regular: inline (uv len + bytes) | chunks (uv n, n x ([32] id, uv size))
//	|          lists (uv n, n x ([32] id, uv size, uv count))
//
// sizeHint is about the size of n's encoding (never much less).
func (n *inode) sizeHint() int {
	return 64 + len(n.Inline) + len(n.Target) + len(n.Chunks)*40 + len(n.ChunkLists)*44
}

func (n *inode) encode() []byte {
	b := make([]byte, 0, n.sizeHint())
	var flags byte
	if n.Loaded {
		flags |= flagLoaded
	}
	if n.Staged {
		flags |= flagStaged
	}
	if n.HasXattrs {
		flags |= flagXattrs
	}
	b = append(b, recordVersion, byte(n.Type), flags)
	for _, v := range []uint64{uint64(n.Mode), uint64(n.UID), uint64(n.GID), n.Size, uint64(n.Nlink), n.Rdev} {
		b = binary.AppendUvarint(b, v)
	}
	b = binary.AppendVarint(b, n.Atime)
	b = binary.AppendVarint(b, n.Mtime)
	b = binary.AppendVarint(b, n.Ctime)
	b = binary.AppendUvarint(b, uint64(n.Parent))
	switch n.Type {
	case TypeDir:
		b = append(b, n.Tree[:]...)
	case TypeSymlink:
		b = binary.AppendUvarint(b, uint64(len(n.Target)))
		b = append(b, n.Target...)
	case TypeRegular:
		b = binary.AppendUvarint(b, uint64(len(n.Inline)))
		b = append(b, n.Inline...)
		b = binary.AppendUvarint(b, uint64(len(n.Chunks)))
		for _, c := range n.Chunks {
			b = append(b, c.ID[:]...)
			b = binary.AppendUvarint(b, c.Size)
		}
		b = binary.AppendUvarint(b, uint64(len(n.ChunkLists)))
		for _, l := range n.ChunkLists {
			b = append(b, l.ID[:]...)
			b = binary.AppendUvarint(b, l.Size)
			b = binary.AppendUvarint(b, uint64(l.Count))
		}
	}
	return b
}

// dec is a sticky-error cursor over a record.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: journal record: %s", ErrIO, what)
	}
	d.b = nil
}

func (d *dec) u8() byte {
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) uv() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) u32() uint32 {
	v := d.uv()
	if v > 1<<32-1 {
		d.fail("value out of range")
	}
	return uint32(v)
}

func (d *dec) sv() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) bytes(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail("truncated")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) id() (id chunkstore.ID) {
	copy(id[:], d.bytes(chunkstore.IDSize))
	return id
}

func (d *dec) count(each int) int {
	v := d.uv()
	if v > uint64(len(d.b))/uint64(each) {
		d.fail("count exceeds the record")
		return 0
	}
	return int(v)
}

// decodeInode parses a record. The returned inode does not alias data.
func decodeInode(ino Ino, data []byte) (*inode, error) {
	data = append([]byte(nil), data...) // Badger values are valid only inside the txn
	d := &dec{b: data}
	if v := d.u8(); v != recordVersion && d.err == nil {
		return nil, fmt.Errorf("%w: journal record of inode %d has version %d (this cairn reads %d): written by a newer cairn", ErrIO, ino, v, recordVersion)
	}
	n := &inode{}
	n.Ino = ino
	n.Type = Type(d.u8())
	flags := d.u8()
	n.Loaded, n.Staged, n.HasXattrs = flags&flagLoaded != 0, flags&flagStaged != 0, flags&flagXattrs != 0
	n.Mode, n.UID, n.GID = d.u32(), d.u32(), d.u32()
	n.Size = d.uv()
	n.Nlink = d.u32()
	n.Rdev = d.uv()
	n.Atime, n.Mtime, n.Ctime = d.sv(), d.sv(), d.sv()
	n.Parent = Ino(d.uv())
	if d.err == nil && !n.Type.Valid() {
		d.fail(fmt.Sprintf("unknown type %d", n.Type))
	}
	switch n.Type {
	case TypeDir:
		n.Tree = d.id()
	case TypeSymlink:
		n.Target = string(d.bytes(d.uv()))
	case TypeRegular:
		if l := d.uv(); l > 0 {
			n.Inline = d.bytes(l)
		}
		if c := d.count(chunkstore.IDSize + 1); c > 0 {
			n.Chunks = make([]chunkstore.ChunkRef, c)
			for i := range n.Chunks {
				n.Chunks[i] = chunkstore.ChunkRef{ID: d.id(), Size: d.uv()}
			}
		}
		if c := d.count(chunkstore.IDSize + 2); c > 0 {
			n.ChunkLists = make([]chunkstore.ChunkListRef, c)
			for i := range n.ChunkLists {
				n.ChunkLists[i] = chunkstore.ChunkListRef{ID: d.id(), Size: d.uv(), Count: d.u32()}
			}
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, d.err)
	}
	return n, nil
}

// content returns the committed content of a regular file.
func (n *inode) content() chunkstore.FileContent {
	return chunkstore.FileContent{Size: n.Size, Chunks: n.Chunks, ChunkLists: n.ChunkLists}
}
