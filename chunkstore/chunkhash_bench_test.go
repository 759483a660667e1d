package chunkstore_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/cdc"
)

// chunkHashSize is the input of BenchmarkChunkHash: large enough that the
// run is dominated by steady-state chunking and hashing.
const chunkHashSize = 256 << 20

// BenchmarkChunkHash measures the ingest hot path on one goroutine: stream
// random data through a cdc.Chunker with default Params and compute the
// keyed BLAKE3 ID of every chunk.
//
// Sub-benchmarks:
//   - Sum: Hasher.Sum per chunk, as the store does.
//   - ResetDigest: one Digest reused with Reset, to show what the per-call
//     Clone in Hasher.Sum costs.
//   - HashOnly: Hasher.Sum over precomputed chunks, no chunking.
//   - SmallSum, SmallResetDigest: Sum and a reused Digest on 1 KiB inputs
//     (small files are one chunk each), where the hash state that Sum
//     clones per call (about 11 KB in zeebo/blake3) weighs most.
func BenchmarkChunkHash(b *testing.B) {
	data := make([]byte, chunkHashSize)
	_, _ = rand.NewChaCha8([32]byte{'c', 'a', 'i', 'r', 'n'}).Read(data)
	cutter, err := cdc.NewCutter(cdc.DefaultParams())
	if err != nil {
		b.Fatal(err)
	}
	hasher := chunkstore.NewHasher(chunkstore.Key{1, 2, 3})

	// chunkAll streams data through ch and calls hash on every chunk.
	chunkAll := func(b *testing.B, ch *cdc.Chunker, r *bytes.Reader, hash func([]byte)) {
		r.Reset(data)
		ch.Reset(r)
		for {
			c, err := ch.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				b.Fatal(err)
			}
			hash(c.Data)
		}
	}

	b.Run("Sum", func(b *testing.B) {
		r := bytes.NewReader(data)
		ch := cdc.NewChunker(r, cutter)
		var sink chunkstore.ID
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			chunkAll(b, ch, r, func(p []byte) { sink = hasher.Sum(p) })
		}
		_ = sink
	})

	b.Run("ResetDigest", func(b *testing.B) {
		r := bytes.NewReader(data)
		ch := cdc.NewChunker(r, cutter)
		d := hasher.Digest()
		var sink chunkstore.ID
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			chunkAll(b, ch, r, func(p []byte) {
				d.Reset()
				_, _ = d.Write(p)
				d.Sum(sink[:0])
			})
		}
		_ = sink
	})

	small := data[:1024]
	b.Run("SmallSum", func(b *testing.B) {
		var sink chunkstore.ID
		b.SetBytes(int64(len(small)))
		for b.Loop() {
			sink = hasher.Sum(small)
		}
		_ = sink
	})

	b.Run("SmallResetDigest", func(b *testing.B) {
		d := hasher.Digest()
		var sink chunkstore.ID
		b.SetBytes(int64(len(small)))
		for b.Loop() {
			d.Reset()
			_, _ = d.Write(small)
			d.Sum(sink[:0])
		}
		_ = sink
	})

	b.Run("HashOnly", func(b *testing.B) {
		var chunks [][]byte
		for d := data; len(d) > 0; {
			n := cutter.Cut(d)
			chunks = append(chunks, d[:n])
			d = d[n:]
		}
		var sink chunkstore.ID
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			for _, c := range chunks {
				sink = hasher.Sum(c)
			}
		}
		_ = sink
	})
}
