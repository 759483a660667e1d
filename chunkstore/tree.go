package chunkstore

// Tree format, version 1: one directory, stored as a KindTree blob whose ID
// is the keyed hash of these bytes. The encoding is canonical: a directory
// has exactly one encoding, so identical directories have identical IDs,
// and DecodeTree refuses every other byte string (ErrCorrupt).
//
// Notation: uvarint is an unsigned LEB128 varint (encoding/binary
// AppendUvarint) in its minimal form; svarint is a zigzag varint
// (binary.AppendVarint), also minimal; ID is 32 raw bytes.
//
//	magic     4 bytes   "CTRE"
//	version   1 byte    1 (a higher version is ErrVersion: a newer cairn wrote it)
//	count     uvarint   number of entries, then count entries, sorted by
//	                    name (bytewise), names unique:
//	  name_len  uvarint   1..255
//	  name      name_len bytes, not "." or "..", no '/' or NUL (any other bytes, UTF-8 or not)
//	  type      1 byte    1 regular, 2 dir, 3 symlink, 4 fifo, 5 socket,
//	                      6 char device, 7 block device
//	  mode      uvarint   permission bits incl. setuid/setgid/sticky, <= 07777
//	  uid       uvarint   < 2^32
//	  gid       uvarint   < 2^32
//	  mtime     svarint   nanoseconds since the Unix epoch
//	  atime     svarint   atime - mtime  (int64 arithmetic wrapping modulo 2^64, so
//	  ctime     svarint   ctime - mtime   every value round-trips; usually 0 or small)
//	  size      uvarint   st_size
//	  ino       uvarint   inode number, >= 1; entries sharing one (in a snapshot) are hardlinks
//	  nlink     uvarint   1..2^32-1
//	  nxattr    uvarint   number of xattrs, then nxattr xattrs, sorted by name, unique:
//	    name_len  uvarint   1..255
//	    name      name_len bytes, no NUL
//	    value_len uvarint   0..65536
//	    value     value_len bytes
//	  content, by type:
//	    regular:  form 1 byte, then
//	                0 empty file: nothing (size must be 0)
//	                1 inline:      len uvarint 1..4096 (InlineMax), then len bytes
//	                2 chunks:      n uvarint 1..4096 (ChunkListMax), then n times
//	                                 ID (the zero ID is a hole) | size uvarint >= 1
//	                3 chunk lists: n uvarint >= 1, then n times
//	                                 ID (non-zero, a KindChunkList blob)
//	                                 | size uvarint (plaintext bytes the list covers, >= count)
//	                                 | count uvarint 1..4096; every list but the last holds exactly 4096
//	              size must equal the content's length (the sum of the sizes).
//	    dir:      subtree ID (non-zero)
//	    symlink:  target_len uvarint 1..4095, then the target (no NUL); size must equal target_len
//	    char/block device: rdev uvarint
//	    fifo, socket: nothing
//	nothing follows the last entry.
//
// For example, an empty directory is the 6 bytes 43 54 52 45 01 00, and a
// FIFO named "p" (mode 0600, uid 0, gid 0, all times 0, size 0, ino 1,
// nlink 1, no xattrs) adds the entry 01 70 04 80 03 00 00 00 00 00 00 01 01 00
// after a count of 01.
//
// Fields a type does not use must be zero in an Entry (Rdev outside devices,
// Subtree outside directories...): EncodeTree refuses them rather than drop
// them silently.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

const (
	treeMagic   = "CTRE"
	treeVersion = 1

	// InlineMax is the largest regular file stored inline in its tree entry
	// (Entry.Inline) rather than in chunks.
	InlineMax = 4096

	nameMax       = 255   // NAME_MAX
	symlinkMax    = 4095  // PATH_MAX - 1
	xattrNameMax  = 255   // XATTR_NAME_MAX
	xattrValueMax = 65536 // XATTR_SIZE_MAX

	// minEntrySize is the smallest encoded entry (a FIFO with a one-byte
	// name and every number below 128), used to bound the entry count.
	minEntrySize = 13
)

// EntryType is the file type of a tree entry. The zero value is invalid.
type EntryType uint8

const (
	TypeRegular  EntryType = 1
	TypeDir      EntryType = 2
	TypeSymlink  EntryType = 3
	TypeFIFO     EntryType = 4
	TypeSocket   EntryType = 5
	TypeCharDev  EntryType = 6
	TypeBlockDev EntryType = 7
)

var entryTypeNames = [...]string{"", "regular", "dir", "symlink", "fifo", "socket", "chardev", "blockdev"}

func (t EntryType) String() string {
	if t.Valid() {
		return entryTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Valid reports whether t is a known type.
func (t EntryType) Valid() bool { return t >= TypeRegular && t <= TypeBlockDev }

// Xattr is one extended attribute.
type Xattr struct {
	Name  string `json:"name"`
	Value []byte `json:"value,omitempty"` // an empty value decodes as nil
}

// Entry is one name in a directory, with its inode's stat data and content.
// For a regular file exactly one of Inline, Chunks and ChunkLists is set,
// or none for an empty file; fields a type does not use must be zero.
type Entry struct {
	Name  string // 1..255 bytes, no '/' or NUL, not "." or ".."
	Type  EntryType
	Mode  uint32 // permission bits incl. setuid, setgid, sticky (mask 07777); no type bits
	UID   uint32
	GID   uint32
	Atime int64 // nanoseconds since the Unix epoch
	Mtime int64 // nanoseconds since the Unix epoch
	Ctime int64 // nanoseconds since the Unix epoch
	// Size is st_size. Regular: the content's length (checked); symlink:
	// len(Target) (checked); others: stored as given.
	Size uint64
	// Ino is the inode number (>= 1), preserved across snapshot, remount and
	// resume. Entries with the same Ino in one snapshot are one inode.
	Ino   uint64
	Nlink uint32 // >= 1; > 1 for hardlinked files
	Rdev  uint64 // device number, CharDev and BlockDev only
	// Xattrs are sorted by Name, names unique (Tree.Sort sorts them).
	Xattrs []Xattr

	// Inline is a regular file's whole content, 1..InlineMax bytes.
	Inline []byte
	// Chunks is a regular file's content in file order, at most ChunkListMax
	// of them (SplitChunks decides between Chunks and ChunkLists).
	Chunks []ChunkRef
	// ChunkLists is a large regular file's content as KindChunkList blobs.
	ChunkLists []ChunkListRef
	// Subtree is a directory's tree ID (non-zero).
	Subtree ID
	// Target is a symlink's target: 1..4095 bytes, no NUL.
	Target string
}

// Tree is one directory: its entries sorted by name.
//
// A decoded Tree's strings and byte slices share one private copy of the
// encoded bytes (not the caller's slice): keeping any of them keeps that
// copy alive, and Inline and Xattr values must be treated as read-only.
type Tree struct {
	Entries []Entry
}

// Find returns the entry named name, by binary search.
func (t *Tree) Find(name string) (*Entry, bool) {
	lo, hi := 0, len(t.Entries)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.Entries[m].Name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(t.Entries) && t.Entries[lo].Name == name {
		return &t.Entries[lo], true
	}
	return nil, false
}

// Sort puts the entries, and each entry's xattrs, in the order EncodeTree
// requires (bytewise by name). It does not remove duplicates.
func (t *Tree) Sort() {
	slices.SortFunc(t.Entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	for i := range t.Entries {
		slices.SortFunc(t.Entries[i].Xattrs, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
	}
}

// EncodeTree returns the canonical encoding of t. It refuses (ErrInvalid) a
// tree whose entries are unsorted, duplicated or invalid.
func EncodeTree(t *Tree) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: encode tree: nil tree", ErrInvalid)
	}
	size := len(treeMagic) + 1 + varintSize(uint64(len(t.Entries)))
	for i := range t.Entries {
		e := &t.Entries[i]
		if err := e.check(); err != nil {
			return nil, fmt.Errorf("%w: encode tree: entry %d (%q): %v", ErrInvalid, i, e.Name, err)
		}
		if i > 0 && t.Entries[i-1].Name >= e.Name {
			return nil, fmt.Errorf("%w: encode tree: entry %d (%q): %v", ErrInvalid, i, e.Name, orderError(t.Entries[i-1].Name, e.Name))
		}
		size += e.sizeBound()
	}

	buf := make([]byte, 0, size)
	buf = append(buf, treeMagic...)
	buf = append(buf, treeVersion)
	buf = binary.AppendUvarint(buf, uint64(len(t.Entries)))
	for i := range t.Entries {
		buf = t.Entries[i].appendTo(buf)
	}
	return buf, nil
}

func orderError(prev, name string) error {
	if prev == name {
		return errors.New("duplicate name")
	}
	return fmt.Errorf("names out of order (%q before %q); call Tree.Sort", prev, name)
}

// sizeBound is an upper bound of e's encoded size.
func (e *Entry) sizeBound() int {
	n := 14*10 + len(e.Name) + len(e.Target) + len(e.Inline) +
		len(e.Chunks)*(IDSize+10) + len(e.ChunkLists)*(IDSize+15)
	for _, x := range e.Xattrs {
		n += 8 + len(x.Name) + len(x.Value)
	}
	return n
}

// Regular file content forms.
const (
	formEmpty  = 0
	formInline = 1
	formChunks = 2
	formLists  = 3
)

func (e *Entry) appendTo(buf []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(e.Name)))
	buf = append(buf, e.Name...)
	buf = append(buf, byte(e.Type))
	buf = binary.AppendUvarint(buf, uint64(e.Mode))
	buf = binary.AppendUvarint(buf, uint64(e.UID))
	buf = binary.AppendUvarint(buf, uint64(e.GID))
	buf = binary.AppendVarint(buf, e.Mtime)
	buf = binary.AppendVarint(buf, timeDelta(e.Atime, e.Mtime))
	buf = binary.AppendVarint(buf, timeDelta(e.Ctime, e.Mtime))
	buf = binary.AppendUvarint(buf, e.Size)
	buf = binary.AppendUvarint(buf, e.Ino)
	buf = binary.AppendUvarint(buf, uint64(e.Nlink))
	buf = binary.AppendUvarint(buf, uint64(len(e.Xattrs)))
	for _, x := range e.Xattrs {
		buf = binary.AppendUvarint(buf, uint64(len(x.Name)))
		buf = append(buf, x.Name...)
		buf = binary.AppendUvarint(buf, uint64(len(x.Value)))
		buf = append(buf, x.Value...)
	}
	switch e.Type {
	case TypeRegular:
		switch {
		case len(e.Inline) > 0:
			buf = append(buf, formInline)
			buf = binary.AppendUvarint(buf, uint64(len(e.Inline)))
			buf = append(buf, e.Inline...)
		case len(e.Chunks) > 0:
			buf = append(buf, formChunks)
			buf = appendChunkRefs(buf, e.Chunks)
		case len(e.ChunkLists) > 0:
			buf = append(buf, formLists)
			buf = binary.AppendUvarint(buf, uint64(len(e.ChunkLists)))
			for _, l := range e.ChunkLists {
				buf = append(buf, l.ID[:]...)
				buf = binary.AppendUvarint(buf, l.Size)
				buf = binary.AppendUvarint(buf, uint64(l.Count))
			}
		default:
			buf = append(buf, formEmpty)
		}
	case TypeDir:
		buf = append(buf, e.Subtree[:]...)
	case TypeSymlink:
		buf = binary.AppendUvarint(buf, uint64(len(e.Target)))
		buf = append(buf, e.Target...)
	case TypeCharDev, TypeBlockDev:
		buf = binary.AppendUvarint(buf, e.Rdev)
	}
	return buf
}

// timeDelta returns t - ref, wrapping modulo 2^64 (Go's signed arithmetic
// wraps), so ref + timeDelta(t, ref) == t for all values. Atime and ctime
// are stored this way because they are usually equal or close to mtime: a
// 1-byte delta instead of a 9-byte time.
func timeDelta(t, ref int64) int64 { return t - ref }

// check validates e on its own (not its place in the tree). Encode and
// decode share it, so a decoded tree always re-encodes.
func (e *Entry) check() error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	if !e.Type.Valid() {
		return fmt.Errorf("invalid type %d", uint8(e.Type))
	}
	if e.Mode&^0o7777 != 0 {
		return fmt.Errorf("mode %#o has bits outside 07777 (the file type belongs in Type)", e.Mode)
	}
	if e.Ino == 0 {
		return errors.New("inode number 0")
	}
	if e.Nlink == 0 {
		return errors.New("link count 0")
	}
	if err := checkXattrs(e.Xattrs); err != nil {
		return err
	}
	t := e.Type
	if t != TypeRegular && (len(e.Inline) != 0 || len(e.Chunks) != 0 || len(e.ChunkLists) != 0) {
		return fmt.Errorf("a %s has file content (Inline, Chunks or ChunkLists)", t)
	}
	if t != TypeDir && !e.Subtree.IsZero() {
		return fmt.Errorf("a %s has a subtree ID", t)
	}
	if t != TypeSymlink && e.Target != "" {
		return fmt.Errorf("a %s has a symlink target", t)
	}
	if t != TypeCharDev && t != TypeBlockDev && e.Rdev != 0 {
		return fmt.Errorf("a %s has a device number", t)
	}
	switch t {
	case TypeRegular:
		return e.checkContent()
	case TypeDir:
		if e.Subtree.IsZero() {
			return errors.New("directory without a subtree ID")
		}
	case TypeSymlink:
		switch {
		case e.Target == "":
			return errors.New("symlink with an empty target")
		case len(e.Target) > symlinkMax:
			return fmt.Errorf("symlink target of %d bytes (max %d)", len(e.Target), symlinkMax)
		case strings.IndexByte(e.Target, 0) >= 0:
			return errors.New("symlink target contains NUL")
		case e.Size != uint64(len(e.Target)):
			return fmt.Errorf("symlink size %d, want len(Target) = %d", e.Size, len(e.Target))
		}
	}
	return nil
}

func (e *Entry) checkContent() error {
	forms := 0
	for _, n := range [...]int{len(e.Inline), len(e.Chunks), len(e.ChunkLists)} {
		if n > 0 {
			forms++
		}
	}
	if forms > 1 {
		return errors.New("regular file with more than one of Inline, Chunks, ChunkLists")
	}
	var total uint64
	switch {
	case len(e.Inline) > 0:
		if len(e.Inline) > InlineMax {
			return fmt.Errorf("inline content of %d bytes (max InlineMax = %d)", len(e.Inline), InlineMax)
		}
		total = uint64(len(e.Inline))
	case len(e.Chunks) > 0:
		var err error
		if total, err = checkChunkRefs(e.Chunks); err != nil {
			return err
		}
	case len(e.ChunkLists) > 0:
		last := len(e.ChunkLists) - 1
		for i, l := range e.ChunkLists {
			switch {
			case l.ID.IsZero():
				return fmt.Errorf("chunk list %d has the zero ID", i)
			case l.Count == 0 || l.Count > ChunkListMax:
				return fmt.Errorf("chunk list %d holds %d chunks (want 1..%d)", i, l.Count, ChunkListMax)
			case i < last && l.Count != ChunkListMax:
				return fmt.Errorf("chunk list %d of %d holds %d chunks: every list but the last holds ChunkListMax (%d); use SplitChunks",
					i, len(e.ChunkLists), l.Count, ChunkListMax)
			case l.Size < uint64(l.Count):
				return fmt.Errorf("chunk list %d covers %d bytes in %d chunks (chunks are never empty)", i, l.Size, l.Count)
			}
			var ok bool
			if total, ok = addSize(total, l.Size); !ok {
				return errors.New("chunk list sizes overflow 64 bits")
			}
		}
	}
	if total != e.Size {
		return fmt.Errorf("size %d, but the content holds %d bytes", e.Size, total)
	}
	return nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > nameMax:
		return fmt.Errorf("name of %d bytes (max %d)", len(name), nameMax)
	case name == "." || name == "..":
		return fmt.Errorf("name %q is reserved", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '/' || c == 0 {
			return fmt.Errorf("name contains %q", c)
		}
	}
	return nil
}

func checkXattrs(xs []Xattr) error {
	for i, x := range xs {
		switch {
		case x.Name == "":
			return fmt.Errorf("xattr %d has an empty name", i)
		case len(x.Name) > xattrNameMax:
			return fmt.Errorf("xattr name of %d bytes (max %d)", len(x.Name), xattrNameMax)
		case strings.IndexByte(x.Name, 0) >= 0:
			return fmt.Errorf("xattr name %q contains NUL", x.Name)
		case len(x.Value) > xattrValueMax:
			return fmt.Errorf("xattr %q has a value of %d bytes (max %d)", x.Name, len(x.Value), xattrValueMax)
		case i > 0 && xs[i-1].Name == x.Name:
			return fmt.Errorf("duplicate xattr %q", x.Name)
		case i > 0 && xs[i-1].Name > x.Name:
			return fmt.Errorf("xattrs out of order (%q before %q); call Tree.Sort", xs[i-1].Name, x.Name)
		}
	}
	return nil
}

// DecodeTree decodes and validates an encoded tree. It refuses any input
// EncodeTree would not produce: ErrCorrupt, or ErrVersion for a format
// version this build does not know.
func DecodeTree(data []byte) (*Tree, error) {
	c := cursor{buf: data, what: "tree"}
	c.header(treeMagic, treeVersion)
	n := c.count("entry count", minEntrySize)
	if c.err != nil {
		return nil, c.err
	}
	t := &Tree{}
	if n == 0 {
		c.end()
		if c.err != nil {
			return nil, c.err
		}
		return t, nil
	}
	// Strings and byte slices of the result point into one private copy of
	// data: one allocation instead of one per name, target and value.
	own := make([]byte, len(data))
	copy(own, data)
	d := treeDecoder{c: cursor{buf: own, off: c.off, what: "tree"}}
	t.Entries = make([]Entry, n)
	for i := range t.Entries {
		e := &t.Entries[i]
		d.entry(e)
		if d.c.err == nil && i > 0 && t.Entries[i-1].Name >= e.Name {
			d.c.fail("%v", orderError(t.Entries[i-1].Name, e.Name))
		}
		if d.c.err == nil {
			if err := e.check(); err != nil {
				d.c.fail("%v", err)
			}
		}
		if d.c.err != nil {
			return nil, fmt.Errorf("%w (entry %d)", d.c.err, i)
		}
	}
	d.c.end()
	if d.c.err != nil {
		return nil, d.c.err
	}
	return t, nil
}

// treeDecoder decodes entries from a private copy of the encoded tree.
type treeDecoder struct {
	c      cursor
	chunks []ChunkRef // slab that Entry.Chunks are cut from
	xattrs []Xattr    // slab that Entry.Xattrs are cut from
}

// str reads n bytes as a string that aliases the decoder's private buffer.
// That is sound because the buffer is never written after the copy, and the
// only []byte views handed out (Inline, Xattr values) cover other bytes and
// are capacity-limited.
func (d *treeDecoder) str(field string, n uint64) string {
	off := d.c.span(field, n)
	if off < 0 || n == 0 {
		return ""
	}
	return unsafe.String(&d.c.buf[off], int(n))
}

// bytes reads n bytes as a capacity-limited view of the private buffer, nil
// when n is 0.
func (d *treeDecoder) bytes(field string, n uint64) []byte {
	off := d.c.span(field, n)
	if off < 0 || n == 0 {
		return nil
	}
	end := off + int(n)
	return d.c.buf[off:end:end]
}

// take cuts n elements from a slab, refilling it with room for up to batch
// elements (but no more than the remaining input could describe).
func take[T any](slab *[]T, n, batch, remainingMax int) []T {
	if cap(*slab)-len(*slab) < n {
		*slab = make([]T, 0, n+min(batch, remainingMax))
	}
	s := *slab
	l := len(s)
	*slab = s[:l+n]
	return s[l : l+n : l+n]
}

func (d *treeDecoder) entry(e *Entry) {
	c := &d.c
	e.Name = d.str("name", c.uvarint("name length"))
	e.Type = EntryType(c.byte1("type"))
	e.Mode = c.u32("mode")
	e.UID = c.u32("uid")
	e.GID = c.u32("gid")
	e.Mtime = c.varint("mtime")
	e.Atime = e.Mtime + c.varint("atime") // wraps, as timeDelta does
	e.Ctime = e.Mtime + c.varint("ctime")
	e.Size = c.uvarint("size")
	e.Ino = c.uvarint("ino")
	e.Nlink = c.u32("nlink")
	if nx := c.count("xattr count", 3); nx > 0 {
		xs := take(&d.xattrs, nx, 16, (len(c.buf)-c.off)/3)
		for i := range xs {
			xs[i].Name = d.str("xattr name", c.uvarint("xattr name length"))
			xs[i].Value = d.bytes("xattr value", c.uvarint("xattr value length"))
		}
		e.Xattrs = xs
	}
	if c.err != nil {
		return
	}
	switch e.Type {
	case TypeRegular:
		switch form := c.byte1("content form"); form {
		case formEmpty:
		case formInline:
			n := c.uvarint("inline length")
			if n == 0 && c.err == nil {
				c.fail("inline content of length 0")
			}
			e.Inline = d.bytes("inline content", n)
		case formChunks:
			n := c.count("chunk count", IDSize+1)
			if n == 0 {
				c.fail("chunk form with no chunks")
				return
			}
			refs := take(&d.chunks, n, 64, (len(c.buf)-c.off)/(IDSize+1))
			for i := range refs {
				refs[i].ID = c.id("chunk ID")
				refs[i].Size = c.uvarint("chunk size")
			}
			e.Chunks = refs
		case formLists:
			n := c.count("chunk list count", IDSize+2)
			if n == 0 {
				c.fail("chunk list form with no lists")
				return
			}
			lists := make([]ChunkListRef, n)
			for i := range lists {
				lists[i].ID = c.id("chunk list ID")
				lists[i].Size = c.uvarint("chunk list size")
				lists[i].Count = c.u32("chunk list count")
			}
			e.ChunkLists = lists
		default:
			c.fail("unknown content form %d", form)
		}
	case TypeDir:
		e.Subtree = c.id("subtree")
	case TypeSymlink:
		e.Target = d.str("symlink target", c.uvarint("symlink target length"))
	case TypeCharDev, TypeBlockDev:
		e.Rdev = c.uvarint("rdev")
	case TypeFIFO, TypeSocket:
	default:
		c.fail("invalid type %d", uint8(e.Type))
	}
}
