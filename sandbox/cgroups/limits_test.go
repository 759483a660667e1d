package cgroups

import (
	"errors"
	"math"
	"testing"
)

func TestLimits_Validate(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Limits
		ok   bool
	}{
		{"Zero", Limits{}, true},
		{"All", Limits{MemoryBytes: 64 << 20, Pids: 100, CPUs: 1.5}, true},
		{"MinimumMemory", Limits{MemoryBytes: MinMemoryBytes}, true},
		{"MinimumCPU", Limits{CPUs: MinCPUs}, true},
		{"NegativeMemory", Limits{MemoryBytes: -1}, false},
		{"TinyMemory", Limits{MemoryBytes: 512}, false},
		{"NegativePids", Limits{Pids: -5}, false},
		{"NegativeCPUs", Limits{CPUs: -1}, false},
		{"TinyCPUs", Limits{CPUs: 0.001}, false},
		{"NaNCPUs", Limits{CPUs: math.NaN()}, false},
		{"InfCPUs", Limits{CPUs: math.Inf(1)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want an error wrapping ErrInvalid", err)
			}
		})
	}
}

func TestLimits_CPUQuota(t *testing.T) {
	for cpus, want := range map[float64]int64{0.01: 1000, 0.5: 50000, 1: 100000, 2.25: 225000} {
		if got := (Limits{CPUs: cpus}).cpuQuotaUs(); got != want {
			t.Errorf("cpuQuotaUs(%v) = %d, want %d", cpus, got, want)
		}
	}
}
