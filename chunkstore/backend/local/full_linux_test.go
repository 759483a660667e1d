package local

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/chunkstore/backend"

	"github.com/cairnfs/cairn/internal/testenv"
)

// A full disk is reported as such, leaves no partial object and no
// temporary file, and the backend works again once space is freed.
func TestPut_DiskFull(t *testing.T) {
	dir := testenv.SmallDisk(t, "1m")
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = b.Put(ctx, "packs/aa/big", bytes.NewReader(make([]byte, 2<<20)), backend.Condition{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Put of 2 MiB into 1 MiB: err = %v, want a disk-full error", err)
	}
	if _, err := b.Stat(ctx, "packs/aa/big"); err == nil {
		t.Fatalf("a partial object is visible after a failed Put")
	}
	entries, _ := os.ReadDir(dir + "/packs/aa")
	if len(entries) != 0 {
		t.Fatalf("failed Put left %d files behind", len(entries))
	}
	if _, err := b.Put(ctx, "refs/x", bytes.NewReader([]byte("small")), backend.Condition{}); err != nil {
		t.Fatalf("Put after the failure: %v", err)
	}
}
