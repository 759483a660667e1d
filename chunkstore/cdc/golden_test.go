package cdc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json from the current chunker")

const goldenFile = "testdata/golden.json"

// goldenCase pins the chunk boundaries of one input under one Params.
type goldenCase struct {
	Name   string `json:"name"`
	Params Params `json:"params"`
	// Input names the generator (random or mixed), its seed and size.
	Input     string `json:"input"`
	InputSeed uint64 `json:"input_seed"`
	InputSize int    `json:"input_size"`
	// InputSHA256 guards the generator itself: if it changes, the input
	// changed, not the chunker.
	InputSHA256 string `json:"input_sha256"`
	// Lengths are the chunk lengths in order.
	Lengths []int `json:"lengths"`
	// ChunksSHA256 is the SHA-256 over every chunk's SHA-256, in order.
	ChunksSHA256 string `json:"chunks_sha256"`
}

func goldenCases() []goldenCase {
	seeded := DefaultParams()
	seeded.Seed = 0x9e3779b97f4a7c15
	small := smallParams
	nc0 := smallParams
	nc0.Normalization = 0
	nc0.Seed = 0
	nc3 := Params{Min: 2048, Avg: 8192, Max: 65536, Normalization: 3, Seed: 1 << 63}
	return []goldenCase{
		{Name: "Default", Params: DefaultParams(), Input: "random", InputSeed: 1, InputSize: 4 << 20},
		{Name: "DefaultSeeded", Params: seeded, Input: "random", InputSeed: 1, InputSize: 4 << 20},
		{Name: "DefaultMixed", Params: DefaultParams(), Input: "mixed", InputSeed: 2, InputSize: 4 << 20},
		{Name: "Small", Params: small, Input: "random", InputSeed: 3, InputSize: 256 << 10},
		{Name: "SmallMixed", Params: small, Input: "mixed", InputSeed: 4, InputSize: 256 << 10},
		{Name: "SmallNormalization0", Params: nc0, Input: "random", InputSeed: 3, InputSize: 256 << 10},
		{Name: "Normalization3", Params: nc3, Input: "random", InputSeed: 5, InputSize: 2 << 20},
	}
}

func (g *goldenCase) input() []byte {
	if g.Input == "mixed" {
		return mixedInput(g.InputSeed, g.InputSize)
	}
	return randBytes(g.InputSeed, g.InputSize)
}

// compute fills in the outputs of g from the current chunker.
func (g *goldenCase) compute(tb testing.TB) {
	tb.Helper()
	data := g.input()
	sum := sha256.Sum256(data)
	g.InputSHA256 = hex.EncodeToString(sum[:])
	g.Lengths = cutAll(mustCutter(tb, g.Params), data)
	all := sha256.New()
	for _, n := range g.Lengths {
		h := sha256.Sum256(data[:n])
		all.Write(h[:])
		data = data[n:]
	}
	g.ChunksSHA256 = hex.EncodeToString(all.Sum(nil))
}

// TestGolden fails if any chunk boundary moved. Boundaries are part of the
// store format: a change silently breaks deduplication against every
// existing store. Regenerate with go test ./chunkstore/cdc -update only for
// a deliberate format change.
func TestGolden(t *testing.T) {
	cases := goldenCases()
	for i := range cases {
		cases[i].compute(t)
	}
	if *update {
		b, err := json.MarshalIndent(cases, "", "\t")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(goldenFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenFile)
		return
	}
	b, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("%v (create it with go test ./chunkstore/cdc -update)", err)
	}
	var want []goldenCase
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("%s: %v", goldenFile, err)
	}
	if len(want) != len(cases) {
		t.Fatalf("%s has %d cases, the test defines %d; run with -update after adding a case", goldenFile, len(want), len(cases))
	}
	for i, got := range cases {
		w := want[i]
		t.Run(got.Name, func(t *testing.T) {
			if w.Name != got.Name || w.Params != got.Params || w.Input != got.Input ||
				w.InputSeed != got.InputSeed || w.InputSize != got.InputSize {
				t.Fatalf("case definition differs from %s: %+v", goldenFile, w)
			}
			if w.InputSHA256 != got.InputSHA256 {
				t.Fatalf("input generator changed: input SHA-256 %s, want %s", got.InputSHA256, w.InputSHA256)
			}
			if !equalInts(got.Lengths, w.Lengths) {
				j := firstDiff(got.Lengths, w.Lengths)
				t.Fatalf("chunk boundaries changed: %d chunks, want %d; first difference at chunk %d", len(got.Lengths), len(w.Lengths), j)
			}
			if w.ChunksSHA256 != got.ChunksSHA256 {
				t.Fatalf("chunks SHA-256 %s, want %s", got.ChunksSHA256, w.ChunksSHA256)
			}
		})
	}
}
