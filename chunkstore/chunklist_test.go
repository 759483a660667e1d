package chunkstore

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func goldenChunkList() *ChunkList {
	return &ChunkList{Chunks: []ChunkRef{
		{ID: codecID(1), Size: 1},
		{Size: 4096},                    // a hole
		{ID: codecID(2), Size: 1 << 20}, // a big chunk
		{ID: codecID(3), Size: 65536},
	}}
}

func mustEncodeChunkList(tb testing.TB, l *ChunkList) []byte {
	tb.Helper()
	data, err := EncodeChunkList(l)
	if err != nil {
		tb.Fatalf("EncodeChunkList: %v", err)
	}
	return data
}

func TestChunkList_Golden(t *testing.T) {
	checkGolden(t, "chunklist_v1.golden", mustEncodeChunkList(t, goldenChunkList()))
}

func TestChunkList_RoundTrip(t *testing.T) {
	full := make([]ChunkRef, ChunkListMax)
	for i := range full {
		full[i] = ChunkRef{ID: codecID(byte(i)), Size: uint64(i + 1)}
	}
	for _, l := range []*ChunkList{
		goldenChunkList(),
		{Chunks: []ChunkRef{{Size: 1}}},
		{Chunks: []ChunkRef{{ID: codecID(9), Size: math.MaxUint64}}},
		{Chunks: full},
	} {
		data := mustEncodeChunkList(t, l)
		got, err := DecodeChunkList(data)
		if err != nil {
			t.Fatalf("DecodeChunkList: %v", err)
		}
		if !reflect.DeepEqual(got, l) {
			t.Fatalf("round trip of %d chunks differs", len(l.Chunks))
		}
		if again := mustEncodeChunkList(t, got); !bytes.Equal(again, data) {
			t.Fatal("re-encoding differs")
		}
	}
}

func TestChunkList_SizeRef(t *testing.T) {
	l := goldenChunkList()
	if got, want := l.Size(), uint64(1+4096+1<<20+65536); got != want {
		t.Fatalf("Size = %d, want %d", got, want)
	}
	if got, want := l.Ref(codecID(7)), (ChunkListRef{ID: codecID(7), Size: l.Size(), Count: 4}); got != want {
		t.Fatalf("Ref = %+v, want %+v", got, want)
	}
}

func TestChunkList_Validation(t *testing.T) {
	tests := []struct {
		name string
		l    *ChunkList
		want string
	}{
		{"Nil", nil, "nil list"},
		{"Empty", &ChunkList{}, "no chunks"},
		{"TooMany", &ChunkList{Chunks: make([]ChunkRef, ChunkListMax+1)}, "4097 chunks"},
		{"SizeZero", &ChunkList{Chunks: []ChunkRef{{ID: codecID(1), Size: 1}, {ID: codecID(2)}}}, "chunk 1 has size 0"},
		{"Overflow", &ChunkList{Chunks: []ChunkRef{{Size: math.MaxUint64}, {Size: 1}}}, "overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EncodeChunkList(tt.l)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("EncodeChunkList: %v; want ErrInvalid containing %q", err, tt.want)
			}
			if tt.l == nil {
				return
			}
			raw := appendChunkRefs([]byte("CLST\x01"), tt.l.Chunks)
			_, err = DecodeChunkList(raw)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeChunkList: %v; want ErrCorrupt containing %q", err, tt.want)
			}
		})
	}
}

func TestDecodeChunkList_Corrupt(t *testing.T) {
	one := mustEncodeChunkList(t, &ChunkList{Chunks: []ChunkRef{{ID: codecID(1), Size: 5}}})
	nonMinimal := append(bytes.Clone(one[:len(one)-1]), 0x85, 0x00)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"Nil", nil, "bad magic"},
		{"TreeMagic", []byte("CTRE\x01\x00"), "bad magic"},
		{"VersionZero", []byte("CLST\x00\x01"), "format version 0"},
		{"Trailing", append(bytes.Clone(one), 0), "1 trailing bytes"},
		{"NonMinimalSize", nonMinimal, "non-minimal"},
		{"NonMinimalCount", append([]byte("CLST\x01\x81\x00"), one[6:]...), "non-minimal"},
		{"CountExceedsData", []byte("CLST\x01\x02" + string(one[6:])), "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := DecodeChunkList(tt.data)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeChunkList = %+v, %v; want ErrCorrupt containing %q", l, err, tt.want)
			}
		})
	}
	t.Run("Truncated", func(t *testing.T) {
		data := mustEncodeChunkList(t, goldenChunkList())
		for n := range len(data) {
			if _, err := DecodeChunkList(data[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("first %d of %d bytes: %v, want ErrCorrupt", n, len(data), err)
			}
		}
	})
	t.Run("Version", func(t *testing.T) {
		data := mustEncodeChunkList(t, goldenChunkList())
		data[4] = 2
		if _, err := DecodeChunkList(data); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "upgrade") {
			t.Fatalf("version 2: %v, want ErrVersion saying to upgrade", err)
		}
	})
}

func TestSplitChunks(t *testing.T) {
	mk := func(n int) []ChunkRef {
		cs := make([]ChunkRef, n)
		for i := range cs {
			cs[i] = ChunkRef{ID: codecID(byte(i)), Size: uint64(1 + i%7)}
		}
		return cs
	}
	tests := []struct {
		name      string
		n         int
		directMax int
		direct    int   // len(direct)
		lists     []int // len of each list
	}{
		{"None", 0, 0, 0, nil},
		{"One", 1, 0, 1, nil},
		{"AtDefault", DirectChunksMax, 0, DirectChunksMax, nil},
		{"AboveDefault", DirectChunksMax + 1, 0, 0, []int{DirectChunksMax + 1}},
		{"OneFullList", ChunkListMax, 0, 0, []int{ChunkListMax}},
		{"TwoLists", ChunkListMax + 1, 0, 0, []int{ChunkListMax, 1}},
		{"ThreeLists", 2*ChunkListMax + 100, -1, 0, []int{ChunkListMax, ChunkListMax, 100}},
		{"CustomMax", 10, 10, 10, nil},
		{"CustomMaxExceeded", 11, 10, 0, []int{11}},
		{"HugeMaxClamped", ChunkListMax + 1, 1 << 30, 0, []int{ChunkListMax, 1}},
		{"HugeMaxDirect", ChunkListMax, 1 << 30, ChunkListMax, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks := mk(tt.n)
			direct, lists := SplitChunks(chunks, tt.directMax)
			if len(direct) != tt.direct || len(lists) != len(tt.lists) {
				t.Fatalf("got %d direct, %d lists; want %d, %d", len(direct), len(lists), tt.direct, len(tt.lists))
			}
			var joined []ChunkRef
			joined = append(joined, direct...)
			e := Entry{Name: "f", Type: TypeRegular, Ino: 1, Nlink: 1, Chunks: direct}
			for i, l := range lists {
				if len(l) != tt.lists[i] {
					t.Fatalf("list %d has %d chunks, want %d", i, len(l), tt.lists[i])
				}
				joined = append(joined, l...)
				cl := &ChunkList{Chunks: l}
				mustEncodeChunkList(t, cl)
				e.ChunkLists = append(e.ChunkLists, cl.Ref(codecID(byte(i+1))))
			}
			if len(chunks) > 0 && !reflect.DeepEqual(joined, chunks) {
				t.Fatal("direct and lists do not add up to the input")
			}
			// What SplitChunks returns is always a valid entry.
			for _, c := range chunks {
				e.Size += c.Size
			}
			if _, err := EncodeTree(&Tree{Entries: []Entry{e}}); err != nil {
				t.Fatalf("entry built from SplitChunks: %v", err)
			}
			if len(lists) > 0 {
				// Appending to a list must not overwrite the next one.
				_ = append(lists[0], ChunkRef{})
				if !reflect.DeepEqual(chunks, mk(tt.n)) {
					t.Fatal("appending to a list changed the input")
				}
			}
		})
	}
}
