package cdc

import (
	"bytes"
	"crypto/sha256"
	"math"
	"testing"
)

// smallParams keeps chunks small so that short inputs hold many of them.
var smallParams = Params{Min: 64, Avg: 256, Max: 1024, Normalization: 2, Seed: 42}

// mixedInput returns data with long runs and repetitive text between random
// stretches, to exercise Max cuts and low-entropy content.
func mixedInput(seed uint64, n int) []byte {
	var b bytes.Buffer
	r := randBytes(seed, n)
	for b.Len() < n {
		switch (b.Len() / 7919) % 4 {
		case 0:
			b.Write(r[b.Len() : b.Len()+min(n-b.Len(), 5000)])
		case 1:
			b.Write(make([]byte, 3000))
		case 2:
			b.WriteString("func main() {\n\tfmt.Println(\"hello, world\")\n}\n")
		default:
			b.Write(bytes.Repeat([]byte{0xa5, 0x5a}, 1000))
		}
	}
	return b.Bytes()[:n]
}

func TestCut_MatchesReference(t *testing.T) {
	params := []Params{
		DefaultParams(),
		smallParams,
		{Min: 64, Avg: 128, Max: 129, Normalization: 3, Seed: 7},
		{Min: 100, Avg: 512, Max: 3000, Normalization: 0, Seed: 1},
		{Min: 1000, Avg: 1024, Max: 1 << 20, Normalization: 1, Seed: 2},
	}
	for _, p := range params {
		c := mustCutter(t, p)
		for _, data := range [][]byte{randBytes(1, 3<<20+13), mixedInput(2, 1<<20), make([]byte, 100_000)} {
			got, want := cutAll(c, data), refCutAll(c, data)
			if !equalInts(got, want) {
				i := firstDiff(got, want)
				t.Fatalf("%+v: chunk %d differs from the byte-at-a-time reference: got %v, want %v",
					p, i, got[i:min(i+3, len(got))], want[i:min(i+3, len(want))])
			}
			checkLens(t, p, got, len(data))
		}
	}
}

func TestCut_Tiny(t *testing.T) {
	p := smallParams
	c := mustCutter(t, p)
	data := randBytes(3, 2*p.Max)
	if got := c.Cut(nil); got != 0 {
		t.Errorf("Cut(nil) = %d, want 0", got)
	}
	for n := 0; n <= p.Min; n++ {
		if got := c.Cut(data[:n]); got != n {
			t.Errorf("Cut(%d bytes) = %d, want %d (input not longer than Min)", n, got, n)
		}
	}
	for n := p.Min + 1; n <= len(data); n++ {
		got := c.Cut(data[:n])
		if got < p.Min+1 || got > min(n, p.Max) {
			t.Fatalf("Cut(%d bytes) = %d, want in [%d, %d]", n, got, p.Min+1, min(n, p.Max))
		}
		// A cut found in a prefix is the cut of the whole.
		if got < n && got != c.Cut(data) {
			t.Fatalf("Cut(%d bytes) = %d, but Cut(all) = %d", n, got, c.Cut(data))
		}
	}
}

func TestCut_NoBoundaryCutsAtMax(t *testing.T) {
	// A constant input makes the gear hash constant after 64 bytes; look
	// for a byte value whose hash never matches.
	p := DefaultParams()
	c := mustCutter(t, p)
	for v := range 256 {
		data := bytes.Repeat([]byte{byte(v)}, 3*p.Max+5)
		n := c.Cut(data)
		if n != p.Max && n > p.Min+64 {
			t.Fatalf("constant %#x: Cut = %d, want Max (%d) or a cut within the hash's 64-byte warm-up", v, n, p.Max)
		}
		if n == p.Max {
			lens := cutAll(c, data)
			checkLens(t, p, lens, len(data))
			if got, want := len(lens), 4; got != want {
				t.Fatalf("constant %#x: %d chunks %v, want %d", v, got, lens, want)
			}
			if got := c.Cut(data[:p.Max-1]); got != p.Max-1 {
				t.Fatalf("constant %#x: Cut(Max-1 bytes) = %d, want all of it", v, got)
			}
			return
		}
	}
	t.Fatal("every constant byte value gives a boundary; cannot test the Max cut")
}

// TestCut_ShiftResistance inserts and deletes bytes in the middle of a large
// buffer: only the chunks around the edit may change.
func TestCut_ShiftResistance(t *testing.T) {
	p := DefaultParams()
	p.Seed = 0xfeed
	c := mustCutter(t, p)
	orig := randBytes(4, 32<<20)
	mid := len(orig)/2 + 12345
	edits := map[string][]byte{
		"Insert7": append(append(append([]byte{}, orig[:mid]...), "CHANGED"...), orig[mid:]...),
		"Delete3": append(append([]byte{}, orig[:mid]...), orig[mid+3:]...),
		"Flip1":   append(append(append([]byte{}, orig[:mid]...), orig[mid]^1), orig[mid+1:]...),
	}
	before := chunkSet(orig, cutAll(c, orig))
	for name, edited := range edits {
		t.Run(name, func(t *testing.T) {
			lens := cutAll(c, edited)
			checkLens(t, p, lens, len(edited))
			changed := 0
			for h := range chunkSet(edited, lens) {
				if !before[h] {
					changed++
				}
			}
			if changed < 1 || changed > 3 {
				t.Fatalf("%d of %d chunks changed, want 1 to 3", changed, len(lens))
			}
		})
	}
}

func chunkSet(data []byte, lens []int) map[[32]byte]bool {
	set := make(map[[32]byte]bool, len(lens))
	for _, n := range lens {
		set[sha256.Sum256(data[:n])] = true
		data = data[n:]
	}
	return set
}

// TestCut_Distribution checks chunk sizes on 64 MiB of random data: the mean
// is near Avg, and normalization narrows the spread.
func TestCut_Distribution(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB distribution test skipped in -short mode")
	}
	data := randBytes(5, 64<<20)
	stddev := map[int]float64{}
	for _, nc := range []int{0, 2} {
		p := DefaultParams()
		p.Normalization = nc
		lens := cutAll(mustCutter(t, p), data)
		checkLens(t, p, lens, len(data))
		lens = lens[:len(lens)-1] // the last chunk is cut by EOF
		mean, sd := meanStddev(lens)
		stddev[nc] = sd
		t.Logf("Normalization %d: %d chunks, mean %.0f (%.2f x Avg), stddev %.0f", nc, len(lens), mean, mean/float64(p.Avg), sd)
		if r := mean / float64(p.Avg); r < 0.7 || r > 1.3 {
			t.Errorf("Normalization %d: mean chunk %.0f bytes is %.2f x Avg, want 0.7 to 1.3", nc, mean, r)
		}
	}
	if stddev[2] >= 0.8*stddev[0] {
		t.Errorf("stddev with Normalization 2 (%.0f) is not clearly below Normalization 0 (%.0f)", stddev[2], stddev[0])
	}
}

func meanStddev(lens []int) (mean, sd float64) {
	for _, n := range lens {
		mean += float64(n)
	}
	mean /= float64(len(lens))
	for _, n := range lens {
		d := float64(n) - mean
		sd += d * d
	}
	return mean, math.Sqrt(sd / float64(len(lens)))
}
