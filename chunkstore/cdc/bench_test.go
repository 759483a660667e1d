package cdc

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// BenchmarkCut measures cutting alone: random data, default params, one
// goroutine.
func BenchmarkCut(b *testing.B) {
	c := mustCutter(b, DefaultParams())
	data := randBytes(100, 64<<20)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		for d := data; len(d) > 0; {
			d = d[c.Cut(d):]
		}
	}
}

// BenchmarkChunker measures streaming from an in-memory reader, which adds
// copying into the Chunker's buffer to BenchmarkCut.
func BenchmarkChunker(b *testing.B) {
	c := mustCutter(b, DefaultParams())
	data := randBytes(100, 64<<20)
	ch := NewChunker(nil, c)
	r := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		r.Reset(data)
		ch.Reset(r)
		for {
			_, err := ch.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
