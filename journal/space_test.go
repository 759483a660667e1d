package journal

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkSpaceCheck is what the full-disk guard adds to every metadata
// operation on a disk with room (a statfs every checkEvery or checkBytes).
func BenchmarkSpaceCheck(b *testing.B) {
	dir := b.TempDir()
	meta := filepath.Join(dir, "meta")
	if err := os.Mkdir(meta, 0o700); err != nil {
		b.Fatal(err)
	}
	s := newSpace(dir, meta, badgerOptions(meta), func(string, ...any) {})
	s.reserveSize = 0 // measure the check, not the reserve file
	if err := s.refresh(); err != nil {
		b.Fatal(err)
	}
	if s.free < s.need+checkBytes {
		b.Skipf("the temporary directory's disk has %s free; the benchmark needs %s", mib(s.free), mib(s.need+checkBytes))
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.check(txnEstimate, false); err != nil {
			b.Fatal(err)
		}
	}
}
