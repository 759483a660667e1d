package chunkstore

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// FuzzDecodeTree: DecodeTree never panics, and whatever it accepts is
// canonical: it re-encodes to the same bytes.
func FuzzDecodeTree(f *testing.F) {
	// Seeds stay small (the golden tree without its 4 KiB inline file):
	// the fuzzer minimises every new input, which is slow for big ones.
	small := goldenTree()
	last := &small.Entries[len(small.Entries)-1]
	last.Inline, last.Size = []byte("x"), 1
	f.Add(mustEncodeTree(f, small))
	f.Add(mustEncodeTree(f, &Tree{}))
	f.Add(fifoTree(0x01))
	f.Add(fifoTree(0x81, 0x00))
	// One entry of each kind from the benchmark tree, in name order.
	seen := map[string]bool{}
	var kinds Tree
	for _, e := range benchTree().Entries {
		kind := e.Type.String()
		if len(e.Inline) > 0 {
			kind = "inline"
		}
		if !seen[kind] {
			seen[kind] = true
			kinds.Entries = append(kinds.Entries, e)
		}
	}
	f.Add(mustEncodeTree(f, &kinds))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := DecodeTree(data)
		if err != nil {
			return
		}
		again, err := EncodeTree(tr)
		if err != nil {
			t.Fatalf("decoded tree does not encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded tree re-encodes differently:\n in %x\nout %x", data, again)
		}
		for i := range tr.Entries {
			if e, ok := tr.Find(tr.Entries[i].Name); !ok || e != &tr.Entries[i] {
				t.Fatalf("Find(%q) does not find entry %d", tr.Entries[i].Name, i)
			}
		}
	})
}

// FuzzDecodeChunkList: DecodeChunkList never panics, and whatever it
// accepts re-encodes to the same bytes.
func FuzzDecodeChunkList(f *testing.F) {
	f.Add(mustEncodeChunkList(f, goldenChunkList()))
	f.Add(mustEncodeChunkList(f, &ChunkList{Chunks: []ChunkRef{{Size: 1}}}))
	f.Add([]byte("CLST\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := DecodeChunkList(data)
		if err != nil {
			return
		}
		again, err := EncodeChunkList(l)
		if err != nil {
			t.Fatalf("decoded chunk list does not encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded chunk list re-encodes differently:\n in %x\nout %x", data, again)
		}
	})
}

// FuzzDecodeSnapshot: DecodeSnapshot never panics; whatever it accepts
// encodes, and the encoding is a fixed point (decodes to the same Snapshot
// and re-encodes to the same bytes). Records are not canonical on input
// (see snapshot.go), so the input itself need not come back. Each input is
// tried both as a whole record and as the JSON payload of one, so the
// fuzzer reaches the JSON layer without having to forge zstd checksums.
func FuzzDecodeSnapshot(f *testing.F) {
	golden := mustEncodeSnapshot(f, goldenSnapshot())
	f.Add(golden)
	f.Add(snapshotJSON(f, golden))
	minimal := mustEncodeSnapshot(f, &Snapshot{Root: codecID(1), Workspace: "w", Seq: 1, Time: time.Unix(0, 1)})
	f.Add(minimal)
	f.Add(snapshotJSON(f, minimal))
	f.Add([]byte(`{"root":"` + codecID(1).String() + `","workspace":"w","seq":1,"time":"2000-01-01T00:00:00+01:00",` +
		`"stats":{},"changes":[{"path_bytes":"/w==","op":"added","size":1}],"expires":"9999-12-31T23:59:59.999999999Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSnapshotFixedPoint(t, data)
		checkSnapshotFixedPoint(t, wrapSnapshotJSON(data))
	})
}

func checkSnapshotFixedPoint(t *testing.T, data []byte) {
	s, err := DecodeSnapshot(data)
	if err != nil {
		return
	}
	enc, err := EncodeSnapshot(s)
	if err != nil {
		t.Fatalf("decoded snapshot does not encode: %v\n%+v", err, s)
	}
	s2, err := DecodeSnapshot(enc)
	if err != nil {
		t.Fatalf("encoded snapshot does not decode: %v", err)
	}
	if !reflect.DeepEqual(s, s2) {
		t.Fatalf("decode(encode(s)) != s:\n got %+v\nwant %+v", s2, s)
	}
	if again, err := EncodeSnapshot(s2); err != nil || !bytes.Equal(again, enc) {
		t.Fatalf("encoding is not a fixed point (err %v)", err)
	}
}
