package fs

import (
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/journal"
)

// TestDirCookies: offsets increase strictly, stay past those of "." and
// "..", and a name keeps its offset when others come and go (what lets a
// reader continue in a listing read again after a change).
func TestDirCookies(t *testing.T) {
	var ents []journal.DirEntry
	for i := range 5000 {
		ents = append(ents, journal.DirEntry{Name: fmt.Sprintf("f%d", i), Ino: journal.Ino(i + 2)})
	}
	// Equal names cannot be in one directory, but stand for names whose
	// hashes collide.
	ents = append(ents, journal.DirEntry{Name: "f7", Ino: 9999})
	all := dirCookies(ents)
	off := map[journal.Ino]uint64{}
	for i, e := range all {
		if e.off <= offDotDot || (i > 0 && e.off <= all[i-1].off) || e.off >= 1<<63 {
			t.Fatalf("entry %d (%s): offset %d after %d", i, e.Name, e.off, all[max(i-1, 0)].off)
		}
		off[e.Ino] = e.off
	}
	some := dirCookies(ents[1000:3000])
	if len(some) != 2000 {
		t.Fatalf("%d entries", len(some))
	}
	for _, e := range some {
		if e.off != off[e.Ino] {
			t.Errorf("%s: offset %d in a smaller listing, %d in the whole", e.Name, e.off, off[e.Ino])
		}
	}
}
