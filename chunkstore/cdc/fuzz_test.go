package cdc

import (
	"bytes"
	"testing"
)

// fuzzParams derives small valid Params from fuzzer-chosen numbers: Avg 128
// to 1024, Min from 64 up to Avg-1, Max from Avg+1 up to 8*Avg.
func fuzzParams(shape uint32, seed uint64) Params {
	avg := 128 << (shape & 3)
	minSize := MinMin + int(shape>>2&0x3ff)%(avg-MinMin)
	maxSize := avg + 1 + int(shape>>12&0x1fff)%(7*avg)
	return Params{Min: minSize, Avg: avg, Max: maxSize, Normalization: int(shape >> 28 & 3), Seed: seed}
}

// FuzzChunker checks, for any input and small Params, that Cut agrees with the
// byte-at-a-time reference, that streaming with arbitrary short reads gives
// the same chunks, and the size invariants.
func FuzzChunker(f *testing.F) {
	f.Add([]byte{}, uint32(0), uint64(0), uint64(0))
	f.Add([]byte("hello, world"), uint32(7), uint64(1), uint64(2))
	f.Add(bytes.Repeat([]byte{0}, 5000), uint32(0x3000_1234), uint64(3), uint64(4))
	f.Add(randBytes(6, 8000), uint32(0x2abc_def1), uint64(5), uint64(6))
	f.Fuzz(func(t *testing.T, data []byte, shape uint32, seed, readSeed uint64) {
		p := fuzzParams(shape, seed)
		c := mustCutter(t, p)
		want := refCutAll(c, data)
		got := cutAll(c, data)
		if !equalInts(got, want) {
			t.Fatalf("%+v: Cut chunks %v, reference %v", p, got, want)
		}
		checkLens(t, p, got, len(data))
		r := newShortReader(data, readSeed, 1+int(readSeed>>32)%(2*p.Max))
		if s := streamAll(t, NewChunker(r, c), data); !equalInts(s, want) {
			t.Fatalf("%+v: streamed chunks %v, Cut %v", p, s, want)
		}
	})
}
