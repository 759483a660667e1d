package cdc

import (
	"bytes"
	"testing"
)

// Boundaries must not depend on whether a Chunker is new, reused after a
// short stream, or reused with a grown buffer (the store pools chunkers).
func TestChunker_ReuseKeepsBoundaries(t *testing.T) {
	c := mustCutter(t, DefaultParams())
	data := randBytes(5, 20<<20)
	lens := func(ch *Chunker) []int {
		var out []int
		for {
			k, err := ch.Next()
			if err != nil {
				return out
			}
			out = append(out, len(k.Data))
		}
	}
	fresh := lens(NewChunker(bytes.NewReader(data), c))
	ch := NewChunker(bytes.NewReader(make([]byte, 100)), c)
	lens(ch)
	ch.Reset(bytes.NewReader(data))
	reused := lens(ch)
	big := NewChunker(bytes.NewReader(randBytes(9, 30<<20)), c)
	lens(big)
	big.Reset(bytes.NewReader(data))
	grown := lens(big)
	t.Logf("fresh %d chunks, reused-small %d, reused-grown %d", len(fresh), len(reused), len(grown))
	for i := range fresh {
		if i >= len(reused) || fresh[i] != reused[i] || i >= len(grown) || fresh[i] != grown[i] {
			t.Fatalf("chunk %d differs: fresh %d reused %v grown %v", i, fresh[i], reused[min(i, len(reused)-1)], grown[min(i, len(grown)-1)])
		}
	}
}
