package journal_test

import (
	"strconv"
	"testing"

	"github.com/cairnfs/cairn/journal"
)

// BenchmarkCreateOpenRelease is what `open(O_CREAT)` + `close` costs the
// journal through the FUSE layer with passthrough: create, open with a
// backing file for writing, release.
func BenchmarkCreateOpenRelease(b *testing.B) {
	j, _ := bigWorkspace(b, 0)
	b.ResetTimer()
	for i := range b.N {
		a, err := j.Create(ctx, journal.Root, journal.RootIno, "f"+strconv.Itoa(i), 0o644)
		if err != nil {
			b.Fatal(err)
		}
		h, err := j.Open(ctx, journal.Root, a.Ino, true, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Release(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
}
