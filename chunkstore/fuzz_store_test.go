package chunkstore

import (
	"bytes"
	"testing"
)

// Fuzz targets for the store's own decoders (index files, pack trailers,
// config and ref objects). Each must refuse bad input with an error, never
// panic, and re-encode what it accepts to the same bytes where the format is
// canonical.

func FuzzDecodeIndex(f *testing.F) {
	f.Add(encodeIndex(&indexFile{}))
	f.Add(encodeIndex(&indexFile{
		Supersedes: []ID{{1}},
		Packs: []indexPack{{ID: ID{2}, Entries: []packEntry{
			{ID: ID{3}, Kind: KindData, Comp: compZstd, Offset: packHeaderSize, Stored: 10, Raw: 20},
			{ID: ID{4}, Kind: KindTree, Comp: compNone, Offset: packHeaderSize + 10, Stored: 5, Raw: 5},
		}}},
	}))
	f.Add([]byte("CAIRNIX\x02"))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := decodeIndex(data)
		if err != nil {
			return
		}
		if got := encodeIndex(idx); !bytes.Equal(got, data) {
			t.Fatalf("index re-encodes differently:\n in %x\nout %x", data, got)
		}
	})
}

func FuzzDecodePackTrailer(f *testing.F) {
	pack := packHeader()
	pack = append(pack, "hello, world"...)
	pack = appendPackTrailer(pack, []packEntry{
		{ID: ID{1}, Kind: KindData, Comp: compNone, Offset: packHeaderSize, Stored: 5, Raw: 5},
		{ID: ID{2}, Kind: KindData, Comp: compZstd, Offset: packHeaderSize + 5, Stored: 7, Raw: 100},
	})
	f.Add(pack)
	f.Add(appendPackTrailer(packHeader(), nil))
	f.Fuzz(func(t *testing.T, pack []byte) {
		if len(pack) < packFooterSize {
			return
		}
		n, err := packTrailerLen(pack[len(pack)-packFooterSize:], int64(len(pack)))
		if err != nil {
			return
		}
		entries, err := decodePackTrailer(pack[len(pack)-packFooterSize-n:], int64(len(pack)))
		if err != nil {
			return
		}
		blobEnd := len(pack) - packFooterSize - n
		for _, e := range entries {
			if int(e.Offset)+int(e.Stored) > blobEnd || e.Offset < packHeaderSize {
				t.Fatalf("accepted entry %+v outside the blob area [%d, %d)", e, packHeaderSize, blobEnd)
			}
		}
		if got := appendPackTrailer(append([]byte(nil), pack[:blobEnd]...), entries); !bytes.Equal(got, pack) {
			t.Fatalf("trailer re-encodes differently")
		}
	})
}

func FuzzDecodeConfig(f *testing.F) {
	cfg, err := newConfig(InitOptions{})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := encodeConfig(cfg)
	f.Add(good)
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decodeConfig accepted an invalid config: %v", err)
		}
	})
}

func FuzzDecodeRef(f *testing.F) {
	good, _ := encodeRef(&Ref{Workspace: "main", Snapshot: ID{1}, Generation: 3})
	f.Add(good)
	f.Add([]byte(`{"version":1,"workspace":"../x","snapshot":"00","generation":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRef(data)
		if err != nil {
			return
		}
		if ValidWorkspaceName(r.Workspace) != nil || r.Snapshot.IsZero() || r.Generation == 0 {
			t.Fatalf("decodeRef accepted an invalid ref: %+v", r)
		}
	})
}
