package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBigDir_SmallFiles is issue 15's recipe: a turn creates 1,000 files
// of 4,000 bytes in one directory (their content lives inline in the
// journal's records, past what one Badger transaction holds). Both
// snapshots succeed and stay in the log; another machine and a fork read
// every file back.
func TestBigDir_SmallFiles(t *testing.T) {
	const files, size = 1000, 4000
	content := func(i int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("<%07d>", i)), size/9+1)[:size]
	}
	in := newInstance(t)
	dir := in.mount("big")
	d := filepath.Join(dir, "many")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), content(i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	id1 := strings.TrimSpace(in.must("snapshot", "big", "-m", "turn 1"))
	if err := os.WriteFile(filepath.Join(d, "f0000"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	id2 := strings.TrimSpace(in.must("snapshot", "big", "-m", "turn 2"))
	in.must("unmount", "big")

	log := decodeJSON[[]struct {
		ID  string `json:"id"`
		Ref string `json:"ref"`
	}](t, in.must("log", "--json", "big"))
	if len(log) != 2 || log[0].ID != id2 || log[0].Ref != "big@2" || log[1].ID != id1 || log[1].Ref != "big@1" {
		t.Fatalf("log = %+v, want big@2 %s and big@1 %s", log, id2, id1)
	}

	check := func(what, root string, turn int) {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(root, "many"))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(ents) != files {
			t.Fatalf("%s: %d files, want %d", what, len(ents), files)
		}
		for i := range files {
			got, err := os.ReadFile(filepath.Join(root, "many", fmt.Sprintf("f%04d", i)))
			want := content(i)
			if i == 0 && turn == 2 {
				want = []byte("changed")
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: many/f%04d: %d bytes (%v), want the %d written", what, i, len(got), err, len(want))
			}
		}
	}
	other := in.otherMachine()
	check("another machine", other.mount("big"), 2)
	check("fork of big@1", other.mount("big-fork", "--from", "big@1"), 1)
}
