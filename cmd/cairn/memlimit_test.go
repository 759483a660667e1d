package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// The daemon's soft memory limit is set unless GOMEMLIMIT chose one.
func TestDaemonMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		t.Setenv("GOMEMLIMIT", v) // restored at the end
	}
	os.Unsetenv("GOMEMLIMIT")
	debug.SetMemoryLimit(math.MaxInt64)
	setDaemonMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != daemonMemoryLimit {
		t.Fatalf("limit %d without GOMEMLIMIT, want %d", got, daemonMemoryLimit)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(math.MaxInt64)
	setDaemonMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit %d with GOMEMLIMIT set, want it left alone", got)
	}
}
