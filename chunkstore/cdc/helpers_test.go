package cdc

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// randBytes returns n deterministic pseudo-random bytes for seed.
func randBytes(seed uint64, n int) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b) // never fails
	return b
}

// mustCutter returns a Cutter for p or fails tb.
func mustCutter(tb testing.TB, p Params) *Cutter {
	tb.Helper()
	c, err := NewCutter(p)
	if err != nil {
		tb.Fatalf("NewCutter(%+v): %v", p, err)
	}
	return c
}

// cutAll splits data with repeated calls to Cut, treating data as the whole
// stream, and returns the chunk lengths.
func cutAll(c *Cutter, data []byte) []int {
	var lens []int
	for len(data) > 0 {
		n := c.Cut(data)
		lens = append(lens, n)
		data = data[n:]
	}
	return lens
}

// refCut is a byte-at-a-time transcription of the FastCDC algorithm (one
// gear update and one mask test per byte), used as the reference for the
// unrolled Cut.
func refCut(c *Cutter, data []byte) int {
	n := len(data)
	if n <= c.min {
		return n
	}
	n = min(n, c.max)
	normal := min(c.avg, n)
	var fp uint64
	i := c.min
	for ; i < normal; i++ {
		fp = fp<<1 + c.gear[0][data[i]]
		if fp&c.maskS == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		fp = fp<<1 + c.gear[0][data[i]]
		if fp&c.maskL == 0 {
			return i + 1
		}
	}
	return n
}

// refCutAll is cutAll with refCut.
func refCutAll(c *Cutter, data []byte) []int {
	var lens []int
	for len(data) > 0 {
		n := refCut(c, data)
		lens = append(lens, n)
		data = data[n:]
	}
	return lens
}

// streamAll runs a Chunker over r and returns the chunk lengths, checking
// offsets and that the chunks concatenate to want.
func streamAll(tb testing.TB, ch *Chunker, want []byte) []int {
	tb.Helper()
	var lens []int
	var off int64
	for {
		c, err := ch.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("Next after %d chunks: %v", len(lens), err)
		}
		if c.Offset != off {
			tb.Fatalf("chunk %d: Offset %d, want %d", len(lens), c.Offset, off)
		}
		if end := off + int64(len(c.Data)); end > int64(len(want)) || !bytes.Equal(c.Data, want[off:end]) {
			tb.Fatalf("chunk %d at %d (%d bytes): data differs from input", len(lens), off, len(c.Data))
		}
		off += int64(len(c.Data))
		lens = append(lens, len(c.Data))
	}
	if off != int64(len(want)) {
		tb.Fatalf("chunks cover %d bytes, input has %d", off, len(want))
	}
	if _, err := ch.Next(); !errors.Is(err, io.EOF) {
		tb.Fatalf("Next after EOF: %v, want io.EOF", err)
	}
	return lens
}

// checkLens checks the size invariants of a chunking of total bytes.
func checkLens(tb testing.TB, p Params, lens []int, total int) {
	tb.Helper()
	sum := 0
	for i, n := range lens {
		last := i == len(lens)-1
		if n > p.Max || n < 1 || (!last && n < p.Min) {
			tb.Fatalf("chunk %d of %d: %d bytes, want [%d, %d] (last: [1, %d])", i, len(lens), n, p.Min, p.Max, p.Max)
		}
		sum += n
	}
	if sum != total {
		tb.Fatalf("chunk lengths sum to %d, input has %d bytes", sum, total)
	}
}

// shortReader returns reads of 1..max bytes, sizes drawn from a PRNG.
type shortReader struct {
	data []byte
	rng  *rand.Rand
	max  int
}

func newShortReader(data []byte, seed uint64, max int) *shortReader {
	return &shortReader{data: data, rng: rand.New(rand.NewPCG(seed, 1)), max: max}
}

func (r *shortReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+r.rng.IntN(r.max), len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// firstDiff returns the first index where a and b differ.
func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
