package chunkstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The -update flag rewrites the golden files in testdata. Another test file
// of this test binary may define -update as well; the flag is then shared
// (whoever registers it second must check flag.Lookup first, as here).
var _ = func() bool {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files in testdata")
	}
	return true
}()

// updateGolden reports whether -update was given.
func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// checkGolden compares got with testdata/name, or rewrites it under -update.
func checkGolden(tb testing.TB, name string, got []byte) {
	tb.Helper()
	path := filepath.Join("testdata", name)
	if updateGolden() {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		tb.Logf("wrote %s (%d bytes)", path, len(got))
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (create it with go test ./chunkstore/ -run %s -update)", err, tb.Name())
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		tb.Fatalf("%s: encoding changed at byte %d (got %d bytes, want %d). A format change needs a new "+
			"format version, not a new golden file; rewrite it with -update only if the change is intended",
			path, i, len(got), len(want))
	}
}

// codecID returns a distinct non-zero ID derived from b.
func codecID(b byte) ID {
	var id ID
	for i := range id {
		id[i] = b ^ byte(i*7+1)
	}
	return id
}

// goldenTree covers every entry type and every field.
func goldenTree() *Tree {
	const t0 = int64(1_700_000_000_123_456_789)
	return &Tree{Entries: []Entry{
		{Name: "a.txt", Type: TypeRegular, Mode: 0o644, UID: 1000, GID: 1000,
			Atime: t0, Mtime: t0 - 1, Ctime: t0 + 1, Size: 13, Ino: 2, Nlink: 1,
			Xattrs: []Xattr{
				{Name: "security.selinux", Value: []byte("system_u:object_r:user_home_t:s0\x00")},
				{Name: "user.empty"},
				{Name: "user.mime", Value: []byte("text/plain")},
			},
			Inline: []byte("hello, cairn\n")},
		{Name: "big.bin", Type: TypeRegular, Mode: 0o600, UID: 0, GID: 0,
			Atime: t0, Mtime: t0, Ctime: t0, Size: 4096*8192 + 12345, Ino: 1 << 40, Nlink: 1,
			ChunkLists: []ChunkListRef{
				{ID: codecID(1), Size: 4096 * 8192, Count: ChunkListMax},
				{ID: codecID(2), Size: 12345, Count: 3},
			}},
		{Name: "bin", Type: TypeDir, Mode: 0o1777, UID: 1, GID: 2,
			Atime: t0, Mtime: t0, Ctime: t0, Size: 4096, Ino: 3, Nlink: 2,
			Subtree: codecID(3)},
		{Name: "blk", Type: TypeBlockDev, Mode: 0o660, GID: 6,
			Atime: t0, Mtime: t0, Ctime: t0, Ino: 4, Nlink: 1, Rdev: 8 << 8}, // major 8, minor 0
		{Name: "chr", Type: TypeCharDev, Mode: 0o666,
			Atime: t0, Mtime: t0, Ctime: t0, Ino: 5, Nlink: 1, Rdev: 1<<8 | 3},
		{Name: "empty", Type: TypeRegular, Mode: 0o644,
			Atime: 0, Mtime: 0, Ctime: 0, Ino: 6, Nlink: 1},
		{Name: "fifo", Type: TypeFIFO, Mode: 0o600,
			Atime: t0, Mtime: t0, Ctime: t0, Ino: 7, Nlink: 1},
		{Name: "hard1", Type: TypeRegular, Mode: 0o4755, UID: 1000, GID: 1000,
			Atime: t0, Mtime: t0, Ctime: t0, Size: 1750, Ino: 42, Nlink: 2,
			Chunks: []ChunkRef{{ID: codecID(4), Size: 1000}, {Size: 500}, {ID: codecID(5), Size: 250}}},
		{Name: "hard2", Type: TypeRegular, Mode: 0o4755, UID: 1000, GID: 1000,
			Atime: t0, Mtime: t0, Ctime: t0, Size: 1750, Ino: 42, Nlink: 2,
			Chunks: []ChunkRef{{ID: codecID(4), Size: 1000}, {Size: 500}, {ID: codecID(5), Size: 250}}},
		{Name: "link", Type: TypeSymlink, Mode: 0o777,
			Atime: t0, Mtime: t0, Ctime: t0, Size: 14, Ino: 8, Nlink: 1,
			Target: "../target/file"},
		{Name: "old", Type: TypeRegular, Mode: 0o2640, UID: math.MaxUint32, GID: math.MaxUint32,
			Atime: math.MinInt64, Mtime: -1, Ctime: math.MaxInt64, Size: 1, Ino: math.MaxUint64, Nlink: math.MaxUint32,
			Inline: []byte{0}},
		{Name: "sock", Type: TypeSocket, Mode: 0o755,
			Atime: t0, Mtime: t0, Ctime: t0, Ino: 9, Nlink: 1},
		{Name: "z\xff\xfe", Type: TypeRegular, Mode: 0o644,
			Atime: t0, Mtime: t0, Ctime: t0, Size: InlineMax, Ino: 10, Nlink: 1,
			Inline: bytes.Repeat([]byte("x"), InlineMax)},
	}}
}

func mustEncodeTree(tb testing.TB, t *Tree) []byte {
	tb.Helper()
	data, err := EncodeTree(t)
	if err != nil {
		tb.Fatalf("EncodeTree: %v", err)
	}
	return data
}

// rawTree encodes entries without validation, to make invalid input for
// DecodeTree.
func rawTree(entries ...Entry) []byte {
	buf := []byte(treeMagic + "\x01")
	buf = binary.AppendUvarint(buf, uint64(len(entries)))
	for i := range entries {
		buf = entries[i].appendTo(buf)
	}
	return buf
}

func TestTree_Golden(t *testing.T) {
	data := mustEncodeTree(t, goldenTree())
	checkGolden(t, "tree_v1.golden", data)
}

func TestTree_RoundTrip(t *testing.T) {
	want := goldenTree()
	data := mustEncodeTree(t, want)
	got, err := DecodeTree(data)
	if err != nil {
		t.Fatalf("DecodeTree: %v", err)
	}
	if len(got.Entries) != len(want.Entries) {
		t.Fatalf("got %d entries, want %d", len(got.Entries), len(want.Entries))
	}
	for i := range want.Entries {
		if g, w := got.Entries[i], want.Entries[i]; !reflect.DeepEqual(g, w) {
			t.Errorf("entry %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	again := mustEncodeTree(t, got)
	if !bytes.Equal(again, data) {
		t.Errorf("re-encoding the decoded tree gives other bytes")
	}

	t.Run("Empty", func(t *testing.T) {
		data := mustEncodeTree(t, &Tree{})
		if got, want := data, []byte("CTRE\x01\x00"); !bytes.Equal(got, want) {
			t.Fatalf("empty tree = %q, want %q", got, want)
		}
		tr, err := DecodeTree(data)
		if err != nil || len(tr.Entries) != 0 {
			t.Fatalf("DecodeTree(empty) = %+v, %v", tr, err)
		}
	})

	t.Run("PrivateCopy", func(t *testing.T) {
		data := mustEncodeTree(t, goldenTree())
		tr, err := DecodeTree(data)
		if err != nil {
			t.Fatal(err)
		}
		for i := range data {
			data[i] = 0xAA
		}
		if e, ok := tr.Find("link"); !ok || e.Target != "../target/file" {
			t.Fatalf("decoded tree changed with its input: %+v", e)
		}
		// Appending to a decoded slice must not clobber what follows it.
		a, _ := tr.Find("a.txt")
		_ = append(a.Inline, "XXXXXXXXXXXXXXXXXXXXXXXX"...)
		_ = append(a.Xattrs[0].Value, "XXXXXXXXXXXXXXXXXXXXXXXX"...)
		if !bytes.Equal(mustEncodeTree(t, tr), mustEncodeTree(t, goldenTree())) {
			t.Fatal("appending to decoded slices changed the tree")
		}
	})
}

func TestTree_Find(t *testing.T) {
	tr := goldenTree()
	for i := range tr.Entries {
		name := tr.Entries[i].Name
		e, ok := tr.Find(name)
		if !ok || e != &tr.Entries[i] {
			t.Errorf("Find(%q) = %p, %v; want entry %d", name, e, ok, i)
		}
	}
	for _, name := range []string{"", "0", "a", "a.txt0", "bim", "zz", "\xff", "hard"} {
		if e, ok := tr.Find(name); ok {
			t.Errorf("Find(%q) found %q", name, e.Name)
		}
	}
	if _, ok := (&Tree{}).Find("a"); ok {
		t.Error("Find in an empty tree found something")
	}
}

func TestTree_Canonical(t *testing.T) {
	want := mustEncodeTree(t, goldenTree())
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		tr := goldenTree()
		rng.Shuffle(len(tr.Entries), func(i, j int) { tr.Entries[i], tr.Entries[j] = tr.Entries[j], tr.Entries[i] })
		for i := range tr.Entries {
			xs := tr.Entries[i].Xattrs
			rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
		}
		tr.Sort()
		if got := mustEncodeTree(t, tr); !bytes.Equal(got, want) {
			t.Fatal("the same tree built in another order encodes differently after Sort")
		}
	}

	t.Run("Unsorted", func(t *testing.T) {
		tr := goldenTree()
		tr.Entries[0], tr.Entries[1] = tr.Entries[1], tr.Entries[0]
		if _, err := EncodeTree(tr); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "out of order") {
			t.Errorf("EncodeTree(unsorted) = %v, want ErrInvalid (out of order)", err)
		}
		if _, err := DecodeTree(rawTree(tr.Entries...)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeTree(unsorted) = %v, want ErrCorrupt", err)
		}
	})
	t.Run("Duplicate", func(t *testing.T) {
		tr := goldenTree()
		tr.Entries[1] = tr.Entries[0]
		tr.Entries[1].Ino = 99
		if _, err := EncodeTree(tr); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "duplicate") {
			t.Errorf("EncodeTree(duplicate) = %v, want ErrInvalid (duplicate)", err)
		}
		if _, err := DecodeTree(rawTree(tr.Entries...)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeTree(duplicate) = %v, want ErrCorrupt", err)
		}
	})
}

// validFile is a valid regular file entry for the validation table.
func validFile() Entry {
	return Entry{Name: "f", Type: TypeRegular, Mode: 0o644, Size: 3, Ino: 1, Nlink: 1, Inline: []byte("abc")}
}

func TestTree_Validation(t *testing.T) {
	full := make([]ChunkRef, ChunkListMax+1)
	for i := range full {
		full[i] = ChunkRef{ID: codecID(byte(i)), Size: 1}
	}
	tests := []struct {
		name string
		edit func(e *Entry)
		want string // in the message
		// raw: the invalid entry is representable in the encoding, so
		// DecodeTree of its raw encoding must fail too.
		raw bool
	}{
		{"EmptyName", func(e *Entry) { e.Name = "" }, "empty name", true},
		{"LongName", func(e *Entry) { e.Name = strings.Repeat("n", 256) }, "256 bytes", true},
		{"Dot", func(e *Entry) { e.Name = "." }, "reserved", true},
		{"DotDot", func(e *Entry) { e.Name = ".." }, "reserved", true},
		{"Slash", func(e *Entry) { e.Name = "a/b" }, "contains '/'", true},
		{"NUL", func(e *Entry) { e.Name = "a\x00b" }, "contains '\\x00'", true},
		{"TypeZero", func(e *Entry) { e.Type = 0; e.Inline, e.Size = nil, 0 }, "invalid type 0", true},
		{"TypeEight", func(e *Entry) { e.Type = 8; e.Inline, e.Size = nil, 0 }, "invalid type 8", true},
		{"ModeTypeBits", func(e *Entry) { e.Mode = 0o100644 }, "outside 07777", true},
		{"InoZero", func(e *Entry) { e.Ino = 0 }, "inode number 0", true},
		{"NlinkZero", func(e *Entry) { e.Nlink = 0 }, "link count 0", true},
		{"XattrEmptyName", func(e *Entry) { e.Xattrs = []Xattr{{Name: ""}} }, "empty name", true},
		{"XattrLongName", func(e *Entry) { e.Xattrs = []Xattr{{Name: strings.Repeat("x", 256)}} }, "xattr name of 256", true},
		{"XattrNUL", func(e *Entry) { e.Xattrs = []Xattr{{Name: "user.a\x00"}} }, "contains NUL", true},
		{"XattrBigValue", func(e *Entry) { e.Xattrs = []Xattr{{Name: "user.a", Value: make([]byte, 65537)}} }, "65537", true},
		{"XattrDuplicate", func(e *Entry) { e.Xattrs = []Xattr{{Name: "user.a"}, {Name: "user.a"}} }, "duplicate xattr", true},
		{"XattrUnsorted", func(e *Entry) { e.Xattrs = []Xattr{{Name: "user.b"}, {Name: "user.a"}} }, "out of order", true},
		{"TwoForms", func(e *Entry) { e.Chunks = []ChunkRef{{ID: codecID(1), Size: 3}} }, "more than one", false},
		{"InlineTooBig", func(e *Entry) { e.Inline = make([]byte, InlineMax+1); e.Size = InlineMax + 1 }, "inline content of 4097", true},
		{"InlineSize", func(e *Entry) { e.Size = 4 }, "size 4, but the content holds 3", true},
		{"EmptyFileSize", func(e *Entry) { e.Inline = nil }, "size 3, but the content holds 0", true},
		{"ChunkSizeZero", func(e *Entry) { e.Inline = nil; e.Chunks = []ChunkRef{{ID: codecID(1), Size: 0}} }, "size 0", true},
		{"ChunksSize", func(e *Entry) { e.Inline = nil; e.Chunks = []ChunkRef{{ID: codecID(1), Size: 2}} }, "size 3, but", true},
		{"TooManyChunks", func(e *Entry) { e.Inline, e.Size = nil, ChunkListMax+1; e.Chunks = full }, "use SplitChunks", true},
		{"ChunksOverflow", func(e *Entry) {
			e.Inline = nil
			e.Chunks = []ChunkRef{{Size: math.MaxUint64}, {Size: 1}}
		}, "overflow", true},
		{"ListZeroID", func(e *Entry) { e.Inline = nil; e.ChunkLists = []ChunkListRef{{Size: 3, Count: 1}} }, "zero ID", true},
		{"ListCountZero", func(e *Entry) { e.Inline = nil; e.ChunkLists = []ChunkListRef{{ID: codecID(1), Size: 3}} }, "holds 0 chunks", true},
		{"ListCountBig", func(e *Entry) {
			e.Inline, e.Size = nil, 1<<20
			e.ChunkLists = []ChunkListRef{{ID: codecID(1), Size: 1 << 20, Count: ChunkListMax + 1}}
		}, "holds 4097 chunks", true},
		{"ListNotFull", func(e *Entry) {
			e.Inline, e.Size = nil, 6
			e.ChunkLists = []ChunkListRef{{ID: codecID(1), Size: 3, Count: 3}, {ID: codecID(2), Size: 3, Count: 3}}
		}, "every list but the last", true},
		{"ListSizeBelowCount", func(e *Entry) { e.Inline = nil; e.ChunkLists = []ChunkListRef{{ID: codecID(1), Size: 3, Count: 4}} }, "covers 3 bytes in 4 chunks", true},
		{"ListsSize", func(e *Entry) { e.Inline = nil; e.ChunkLists = []ChunkListRef{{ID: codecID(1), Size: 5, Count: 4}} }, "size 3, but", true},
		{"ListsOverflow", func(e *Entry) {
			e.Inline = nil
			e.ChunkLists = []ChunkListRef{{ID: codecID(1), Size: math.MaxUint64, Count: ChunkListMax}, {ID: codecID(2), Size: 5, Count: 4}}
		}, "overflow", true},
		{"RegularSubtree", func(e *Entry) { e.Subtree = codecID(1) }, "has a subtree", false},
		{"RegularTarget", func(e *Entry) { e.Target = "x" }, "has a symlink target", false},
		{"RegularRdev", func(e *Entry) { e.Rdev = 1 }, "has a device number", false},
		{"DirNoSubtree", func(e *Entry) { *e = Entry{Name: "d", Type: TypeDir, Mode: 0o755, Ino: 1, Nlink: 2} }, "without a subtree", true},
		{"DirContent", func(e *Entry) { e.Type, e.Subtree = TypeDir, codecID(1) }, "a dir has file content", false},
		{"SymlinkEmpty", func(e *Entry) { *e = Entry{Name: "l", Type: TypeSymlink, Ino: 1, Nlink: 1} }, "empty target", true},
		{"SymlinkLong", func(e *Entry) {
			*e = Entry{Name: "l", Type: TypeSymlink, Ino: 1, Nlink: 1, Target: strings.Repeat("t", 4096), Size: 4096}
		}, "4096 bytes", true},
		{"SymlinkNUL", func(e *Entry) { *e = Entry{Name: "l", Type: TypeSymlink, Ino: 1, Nlink: 1, Target: "a\x00", Size: 2} }, "contains NUL", true},
		{"SymlinkSize", func(e *Entry) { *e = Entry{Name: "l", Type: TypeSymlink, Ino: 1, Nlink: 1, Target: "abc", Size: 0} }, "symlink size 0", true},
		{"SymlinkSubtree", func(e *Entry) {
			*e = Entry{Name: "l", Type: TypeSymlink, Ino: 1, Nlink: 1, Target: "abc", Size: 3, Subtree: codecID(1)}
		}, "a symlink has a subtree", false},
		{"FIFORdev", func(e *Entry) { *e = Entry{Name: "p", Type: TypeFIFO, Ino: 1, Nlink: 1, Rdev: 5} }, "a fifo has a device number", false},
		{"SocketChunks", func(e *Entry) {
			*e = Entry{Name: "s", Type: TypeSocket, Ino: 1, Nlink: 1, Chunks: []ChunkRef{{ID: codecID(1), Size: 1}}}
		}, "a socket has file content", false},
		{"DeviceTarget", func(e *Entry) { *e = Entry{Name: "c", Type: TypeCharDev, Ino: 1, Nlink: 1, Target: "x"} }, "a chardev has a symlink target", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := validFile()
			tt.edit(&e)
			_, err := EncodeTree(&Tree{Entries: []Entry{e}})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("EncodeTree: %v; want ErrInvalid containing %q", err, tt.want)
			}
			if !tt.raw {
				return
			}
			_, err = DecodeTree(rawTree(e))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeTree: %v; want ErrCorrupt containing %q", err, tt.want)
			}
		})
	}
	t.Run("NilTree", func(t *testing.T) {
		if _, err := EncodeTree(nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("EncodeTree(nil) = %v, want ErrInvalid", err)
		}
	})
	t.Run("ValidEdges", func(t *testing.T) {
		for _, e := range []Entry{
			{Name: strings.Repeat("n", 255), Type: TypeFIFO, Ino: 1, Nlink: 1},
			{Name: "...", Type: TypeSocket, Ino: 1, Nlink: 1, Size: 123}, // size stored as given
			{Name: "l", Type: TypeSymlink, Ino: 1, Nlink: 1, Target: strings.Repeat("t", 4095), Size: 4095},
			{Name: "c", Type: TypeCharDev, Ino: 1, Nlink: 1}, // rdev 0 (an overlayfs whiteout)
			{Name: "x", Type: TypeRegular, Ino: 1, Nlink: 1, Size: 3, Xattrs: []Xattr{
				{Name: strings.Repeat("x", 255), Value: make([]byte, 65536)}}, Inline: []byte("abc")},
			{Name: "h", Type: TypeRegular, Ino: 1, Nlink: 1, Size: 10, Chunks: []ChunkRef{{Size: 10}}}, // all hole
		} {
			data, err := EncodeTree(&Tree{Entries: []Entry{e}})
			if err != nil {
				t.Errorf("EncodeTree(%.20q): %v", e.Name, err)
				continue
			}
			if _, err := DecodeTree(data); err != nil {
				t.Errorf("DecodeTree(%.20q): %v", e.Name, err)
			}
		}
	})
}

// fifoTree returns a one-entry tree (a FIFO named "a") whose mode field is
// the given raw bytes.
func fifoTree(mode ...byte) []byte {
	b := []byte("CTRE\x01\x01\x01a\x04")
	b = append(b, mode...)
	//            uid gid atime mtime ctime size ino nlink nxattr
	return append(b, 0, 0, 0, 0, 0, 0, 1, 1, 0)
}

// TestTree_DocExample checks the worked example in the format comment.
func TestTree_DocExample(t *testing.T) {
	got := mustEncodeTree(t, &Tree{Entries: []Entry{{Name: "p", Type: TypeFIFO, Mode: 0o600, Ino: 1, Nlink: 1}}})
	want := []byte{0x43, 0x54, 0x52, 0x45, 0x01, 0x01, 0x01, 0x70, 0x04, 0x80, 0x03, 0, 0, 0, 0, 0, 0, 0x01, 0x01, 0x00}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x\nwant % x", got, want)
	}
}

func TestDecodeTree_Corrupt(t *testing.T) {
	if _, err := DecodeTree(fifoTree(0x01)); err != nil {
		t.Fatalf("the hand-made tree does not decode: %v", err)
	}
	regular := func(content ...byte) []byte {
		b := []byte("CTRE\x01\x01\x01a\x01\x00\x00\x00\x00\x00\x00\x00\x01\x01\x00")
		return append(b, content...)
	}
	if _, err := DecodeTree(regular(formEmpty)); err != nil {
		t.Fatalf("the hand-made regular file does not decode: %v", err)
	}
	golden := mustEncodeTree(t, goldenTree())
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"Nil", nil, "bad magic"},
		{"Magic", []byte("CTRX\x01\x00"), "bad magic"},
		{"ChunkListMagic", []byte("CLST\x01\x00"), "bad magic"},
		{"VersionZero", []byte("CTRE\x00\x00"), "format version 0"},
		{"NoCount", []byte("CTRE\x01"), "truncated"},
		{"Trailing", append(mustEncodeTree(t, &Tree{}), 0), "1 trailing bytes"},
		{"TrailingAfterEntries", append(bytes.Clone(golden), 0), "1 trailing bytes"},
		{"NonMinimalCount", []byte("CTRE\x01\x80\x00"), "non-minimal"},
		{"NonMinimalMode", fifoTree(0x81, 0x00), "mode: non-minimal"},
		{"NonMinimalMode3", fifoTree(0x81, 0x80, 0x00), "mode: non-minimal"},
		{"Overflow", fifoTree(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02), "overflows"},
		{"ModeOver32Bits", fifoTree(0x80, 0x80, 0x80, 0x80, 0x10), "does not fit in 32 bits"},
		{"CountTooBig", []byte("CTRE\x01\x7f\x00"), "exceeds"},
		{"HugeCount", []byte("CTRE\x01\xff\xff\xff\xff\xff\xff\xff\xff\x7f"), "exceeds"},
		{"UnknownForm", regular(4), "unknown content form 4"},
		{"InlineZero", regular(formInline, 0), "inline content of length 0"},
		{"InlineTruncated", regular(formInline, 5, 'a'), "exceeds the remaining"},
		{"ChunksZero", regular(formChunks, 0), "no chunks"},
		{"ListsZero", regular(formLists, 0), "no lists"},
		{"ChunksTruncated", regular(formChunks, 1, 1, 2, 3), "exceeds"},
		{"UnknownType", []byte("CTRE\x01\x01\x01a\x09\x00\x00\x00\x00\x00\x00\x00\x01\x01\x00"), "invalid type 9"},
		{"XattrCountTooBig", []byte("CTRE\x01\x01\x01a\x04\x00\x00\x00\x00\x00\x00\x00\x01\x01\x7f"), "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := DecodeTree(tt.data)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeTree = %+v, %v; want ErrCorrupt containing %q", tr, err, tt.want)
			}
		})
	}
}

func TestDecodeTree_Truncated(t *testing.T) {
	data := mustEncodeTree(t, goldenTree())
	for n := range len(data) {
		if _, err := DecodeTree(data[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeTree of the first %d of %d bytes: %v, want ErrCorrupt", n, len(data), err)
		}
	}
}

func TestDecodeTree_Version(t *testing.T) {
	data := mustEncodeTree(t, goldenTree())
	for _, v := range []byte{2, 255} {
		data[4] = v
		_, err := DecodeTree(data)
		if !errors.Is(err, ErrVersion) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("version %d: %v, want ErrVersion", v, err)
		}
		if !strings.Contains(err.Error(), "upgrade") || !strings.Contains(err.Error(), fmt.Sprint(v)) {
			t.Errorf("version %d: message %q should name the version and say to upgrade", v, err)
		}
	}
}

// benchTree is a 1000-entry directory shaped like a source tree: mostly
// small inline files and short chunked files, some directories, symlinks
// and xattrs.
func benchTree() *Tree {
	const t0 = int64(1_700_000_000_123_456_789)
	tr := &Tree{}
	for i := range 1000 {
		e := Entry{Name: fmt.Sprintf("file_%04d.go", i), Type: TypeRegular, Mode: 0o644, UID: 1000, GID: 1000,
			Atime: t0 + int64(i)*1e6, Mtime: t0 + int64(i)*1e6, Ctime: t0 + int64(i)*1e6, Ino: uint64(1000 + i), Nlink: 1}
		switch {
		case i%10 < 4: // 40% small files, inline
			e.Inline = bytes.Repeat([]byte{byte(i)}, 200+i%1000)
			e.Size = uint64(len(e.Inline))
		case i%10 < 8: // 40% chunked files of 1-4 chunks
			for j := range 1 + i%4 {
				e.Chunks = append(e.Chunks, ChunkRef{ID: codecID(byte(i + j)), Size: 65536 + uint64(j)})
				e.Size += 65536 + uint64(j)
			}
		case i%10 == 8: // 10% directories
			e.Name = fmt.Sprintf("dir_%04d", i)
			e.Type, e.Mode, e.Nlink, e.Size, e.Subtree = TypeDir, 0o755, 2, 4096, codecID(byte(i))
		default: // 10% symlinks
			e.Name = fmt.Sprintf("link_%04d", i)
			e.Type, e.Mode, e.Target = TypeSymlink, 0o777, fmt.Sprintf("../somewhere/else/file_%04d.go", i)
			e.Size = uint64(len(e.Target))
		}
		if i%20 == 0 {
			e.Xattrs = []Xattr{{Name: "user.origin", Value: []byte("https://example.com/repo")}}
		}
		tr.Entries = append(tr.Entries, e)
	}
	tr.Sort()
	return tr
}

func BenchmarkDecodeTree(b *testing.B) {
	data := mustEncodeTree(b, benchTree())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := DecodeTree(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/entry")
}

func BenchmarkEncodeTree(b *testing.B) {
	tr := benchTree()
	b.SetBytes(int64(len(mustEncodeTree(b, tr))))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := EncodeTree(tr); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/entry")
}

func BenchmarkTreeFind(b *testing.B) {
	tr := benchTree()
	names := make([]string, len(tr.Entries))
	for i := range tr.Entries {
		names[i] = tr.Entries[i].Name
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, ok := tr.Find(names[i%len(names)]); !ok {
			b.Fatal("not found")
		}
		i++
	}
}
