package cdc

import (
	"errors"
	"math/bits"
	"strings"
	"testing"
)

func TestParams_Validate(t *testing.T) {
	def := DefaultParams()
	with := func(f func(*Params)) Params {
		p := def
		f(&p)
		return p
	}
	tests := []struct {
		name  string
		p     Params
		field string // "" if valid
	}{
		{"Default", def, ""},
		{"Smallest", Params{Min: 64, Avg: 128, Max: 129}, ""},
		{"Largest", Params{Min: 1 << 20, Avg: 32 << 20, Max: 64 << 20, Normalization: 3, Seed: ^uint64(0)}, ""},
		{"Zero", Params{}, "Min"},
		{"MinTooSmall", with(func(p *Params) { p.Min = 63 }), "Min"},
		{"MinNegative", with(func(p *Params) { p.Min = -1 }), "Min"},
		{"MaxTooLarge", with(func(p *Params) { p.Max = 64<<20 + 1 }), "Max"},
		{"AvgNotPowerOfTwo", with(func(p *Params) { p.Avg = 65 << 10 }), "Avg"},
		{"AvgZero", with(func(p *Params) { p.Avg = 0 }), "Avg"},
		{"AvgNegative", with(func(p *Params) { p.Avg = -(64 << 10) }), "Avg"},
		{"MinEqualsAvg", with(func(p *Params) { p.Min = p.Avg }), "Min"},
		{"MinAboveAvg", with(func(p *Params) { p.Min = p.Avg * 2 }), "Min"},
		{"AvgEqualsMax", with(func(p *Params) { p.Max = p.Avg }), "Max"},
		{"MaxBelowAvg", with(func(p *Params) { p.Max = p.Avg - 1 }), "Max"},
		{"NormalizationNegative", with(func(p *Params) { p.Normalization = -1 }), "Normalization"},
		{"NormalizationTooLarge", with(func(p *Params) { p.Normalization = 4 }), "Normalization"},
		{"Normalization0", with(func(p *Params) { p.Normalization = 0 }), ""},
		{"Normalization3", with(func(p *Params) { p.Normalization = 3 }), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", tt.p, err)
				}
				if _, err := NewCutter(tt.p); err != nil {
					t.Fatalf("NewCutter(%+v) = %v, want nil", tt.p, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want an error about %s", tt.p, tt.field)
			}
			if !errors.Is(err, ErrInvalidParams) {
				t.Errorf("Validate error %q does not wrap ErrInvalidParams", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Validate error %q does not name field %s", err, tt.field)
			}
			if c, err2 := NewCutter(tt.p); c != nil || !errors.Is(err2, ErrInvalidParams) {
				t.Errorf("NewCutter(%+v) = %v, %v; want nil, ErrInvalidParams", tt.p, c, err2)
			}
		})
	}
}

func TestDefaultParams(t *testing.T) {
	p := DefaultParams()
	want := Params{Min: 8 << 10, Avg: 32 << 10, Max: 128 << 10, Normalization: 2, Seed: 0}
	if p != want {
		t.Fatalf("DefaultParams() = %+v, want %+v", p, want)
	}
}

func TestSpreadMask(t *testing.T) {
	for n := 1; n <= maskHi-maskLo+1; n++ {
		m := spreadMask(n)
		if got := bits.OnesCount64(m); got != n {
			t.Errorf("spreadMask(%d) has %d one-bits", n, got)
		}
		if m>>maskHi != 1 {
			t.Errorf("spreadMask(%d) = %#x: top bit is not %d", n, m, maskHi)
		}
		if n > 1 && m&(1<<maskLo) == 0 {
			t.Errorf("spreadMask(%d) = %#x: bit %d not set", n, m, maskLo)
		}
	}
}

func TestNewCutter_Masks(t *testing.T) {
	for nc := 0; nc <= MaxNormalization; nc++ {
		p := Params{Min: 16 << 10, Avg: 64 << 10, Max: 256 << 10, Normalization: nc} // log2(Avg) = 16
		c := mustCutter(t, p)
		if got, want := bits.OnesCount64(c.maskS), 16+nc; got != want {
			t.Errorf("Normalization %d: maskS has %d bits, want %d", nc, got, want)
		}
		if got, want := bits.OnesCount64(c.maskL), 16-nc; got != want {
			t.Errorf("Normalization %d: maskL has %d bits, want %d", nc, got, want)
		}
	}
}

func TestNewCutter_SeedSelectsTable(t *testing.T) {
	p := DefaultParams()
	a := mustCutter(t, p)
	p.Seed = 1
	b := mustCutter(t, p)
	if a.gear[0] == b.gear[0] {
		t.Fatal("seeds 0 and 1 give the same gear table")
	}
	seen := map[uint64]bool{}
	for _, g := range a.gear[0] {
		if seen[g] {
			t.Fatalf("gear table for seed 0 repeats %#x", g)
		}
		seen[g] = true
	}
	for k := 1; k < len(a.gear); k++ {
		for i := range a.gear[0] {
			if a.gear[k][i] != a.gear[0][i]<<k {
				t.Fatalf("gear[%d][%d] is not gear[0][%d]<<%d", k, i, i, k)
			}
		}
	}
}
