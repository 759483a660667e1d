package cdc

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestChunker_MatchesCut checks that streaming gives the chunks of Cut on the
// whole input, whatever sizes the reader's reads have.
func TestChunker_MatchesCut(t *testing.T) {
	type input struct {
		name string
		data []byte
	}
	inputs := []input{
		{"Random5MiB", randBytes(10, 5<<20+7)},
		{"Mixed3MiB", mixedInput(11, 3<<20)},
		{"Zeros1MiB", make([]byte, 1<<20+1)},
	}
	params := []Params{DefaultParams(), smallParams, {Min: 4096, Avg: 8192, Max: 3 << 20, Normalization: 1, Seed: 3}}
	for _, p := range params {
		c := mustCutter(t, p)
		for _, in := range inputs {
			want := cutAll(c, in.data)
			readers := map[string]io.Reader{
				"Bytes":     bytes.NewReader(in.data),
				"Short1k":   newShortReader(in.data, 1, 1000),
				"Short100k": newShortReader(in.data, 2, 100_000),
				"Half":      iotest.HalfReader(bytes.NewReader(in.data)),
				"DataErr":   iotest.DataErrReader(bytes.NewReader(in.data)),
			}
			for rname, r := range readers {
				got := streamAll(t, NewChunker(r, c), in.data)
				if !equalInts(got, want) {
					t.Fatalf("%+v, %s, %s: chunk %d differs from Cut", p, in.name, rname, firstDiff(got, want))
				}
			}
		}
	}
}

func TestChunker_SmallInputs(t *testing.T) {
	p := smallParams
	c := mustCutter(t, p)
	ch := NewChunker(nil, c)
	for _, n := range []int{0, 1, 2, p.Min - 1, p.Min, p.Min + 1, p.Avg, p.Max - 1, p.Max, p.Max + 1, 3*p.Max + 17, 20_000} {
		data := randBytes(uint64(n), n)
		want := cutAll(c, data)
		for name, r := range map[string]io.Reader{
			"OneByte": iotest.OneByteReader(bytes.NewReader(data)),
			"Short":   newShortReader(data, uint64(n), 37),
			"Bytes":   bytes.NewReader(data),
		} {
			ch.Reset(r)
			got := streamAll(t, ch, data)
			if !equalInts(got, want) {
				t.Fatalf("%d bytes, %s reader: chunks %v, want %v", n, name, got, want)
			}
			if n == 0 && len(got) != 0 {
				t.Fatalf("empty input gave %d chunks", len(got))
			}
			checkLens(t, p, got, n)
		}
	}
}

func TestChunker_Reset(t *testing.T) {
	c := mustCutter(t, smallParams)
	a, b := randBytes(20, 100_000), randBytes(21, 50_000)
	ch := NewChunker(bytes.NewReader(a), c)
	if _, err := ch.Next(); err != nil { // leave a stream half read
		t.Fatal(err)
	}
	ch.Reset(bytes.NewReader(b))
	if got, want := streamAll(t, ch, b), cutAll(c, b); !equalInts(got, want) {
		t.Fatalf("after Reset: chunk %d differs", firstDiff(got, want))
	}
	ch.Reset(bytes.NewReader(a))
	if got, want := streamAll(t, ch, a), cutAll(c, a); !equalInts(got, want) {
		t.Fatalf("after second Reset: chunk %d differs", firstDiff(got, want))
	}
}

func TestChunker_ReadError(t *testing.T) {
	c := mustCutter(t, smallParams)
	data := randBytes(30, 10_000)
	// TimeoutReader returns ErrTimeout on its second read.
	ch := NewChunker(iotest.TimeoutReader(iotest.HalfReader(bytes.NewReader(data))), c)
	var err error
	for range 100 {
		if _, err = ch.Next(); err != nil {
			break
		}
	}
	if !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("Next = %v, want %v", err, iotest.ErrTimeout)
	}
	if _, err := ch.Next(); !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("Next after an error = %v, want the same error again", err)
	}
}

// zeroReader returns (0, nil) forever.
type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestChunker_NoProgress(t *testing.T) {
	ch := NewChunker(zeroReader{}, mustCutter(t, smallParams))
	if _, err := ch.Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("Next = %v, want io.ErrNoProgress", err)
	}
}

// TestCutter_Concurrent shares one Cutter between goroutines (run with -race).
func TestCutter_Concurrent(t *testing.T) {
	c := mustCutter(t, smallParams)
	data := randBytes(40, 1<<20)
	want := cutAll(c, data)
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			// No t.Fatal off the test goroutine: report through errs.
			ch := NewChunker(newShortReader(data, uint64(g), 5000), c)
			var got []int
			for {
				chunk, err := ch.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					errs <- err
					return
				}
				got = append(got, len(chunk.Data))
			}
			if !equalInts(got, want) {
				errs <- errors.New("streamed chunks differ from Cut")
				return
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
