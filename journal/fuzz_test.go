package journal

import (
	"bytes"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
)

// Fuzz targets for the journal's record decoders: they must refuse bad input
// with an error, never panic, and re-encode what they accept to the same
// bytes.

func FuzzDecodeInode(f *testing.F) {
	for _, n := range []*inode{
		{Attr: Attr{Ino: 2, Type: TypeDir, Mode: 0o755, Nlink: 2, Mtime: -5}, Parent: 1, Tree: chunkstore.ID{9}, Loaded: true},
		{Attr: Attr{Ino: 3, Type: TypeRegular, Mode: 0o4755, Size: 5, Nlink: 1}, Inline: []byte("hello"), Staged: true},
		{Attr: Attr{Ino: 4, Type: TypeRegular, Size: 70000, Nlink: 2}, Chunks: []chunkstore.ChunkRef{{ID: chunkstore.ID{1}, Size: 70000}}, HasXattrs: true},
		{Attr: Attr{Ino: 5, Type: TypeRegular, Size: 1 << 30, Nlink: 1}, ChunkLists: []chunkstore.ChunkListRef{{ID: chunkstore.ID{2}, Size: 1 << 30, Count: 4096}}},
		{Attr: Attr{Ino: 6, Type: TypeSymlink, Size: 3, Nlink: 1}, Target: "a/b"},
		{Attr: Attr{Ino: 7, Type: TypeCharDev, Rdev: 1<<8 | 3, Nlink: 1}},
	} {
		f.Add(n.encode())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := decodeInode(7, data)
		if err != nil {
			return
		}
		if got := n.encode(); !bytes.Equal(got, data) {
			// Non-minimal varints decode but re-encode shorter; that is
			// the only accepted difference.
			again, err := decodeInode(7, got)
			if err != nil || !bytes.Equal(again.encode(), got) {
				t.Fatalf("record does not round-trip: %x -> %x", data, got)
			}
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	m := meta{Workspace: "ws", Epoch: 3, Base: chunkstore.ID{1}, Seq: 9, Gen: 4, Committed: 3, NextIno: 100, Bytes: 12345, Files: 7, Dirs: 2}
	f.Add(m.encode())
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMeta(data)
		if err != nil {
			return
		}
		again, err := decodeMeta(m.encode())
		if err != nil || again != m {
			t.Fatalf("state does not round-trip: %+v -> %+v, %v", m, again, err)
		}
	})
}
