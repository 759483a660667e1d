package metalog

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord: any bytes decode to a record or to errTorn, never a
// panic; what decodes encodes to a record that decodes the same.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(nil, 1, []write{{key: []byte("k"), val: []byte("v")}, {key: []byte("d"), del: true}}))
	f.Add(encodeRecord(nil, 1<<40, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ws, n, err := decodeRecord(b)
		if err != nil {
			return
		}
		if n > len(b) {
			t.Fatalf("record of %d bytes in %d", n, len(b))
		}
		seq2, ws2, _, err := decodeRecord(encodeRecord(nil, seq, ws))
		if err != nil || seq2 != seq || len(ws2) != len(ws) {
			t.Fatalf("re-encoded record: seq %d/%d, %d/%d writes, %v", seq2, seq, len(ws2), len(ws), err)
		}
		for i := range ws {
			if !bytes.Equal(ws[i].key, ws2[i].key) || !bytes.Equal(ws[i].val, ws2[i].val) || ws[i].del != ws2[i].del {
				t.Fatalf("write %d differs after re-encoding", i)
			}
		}
	})
}
