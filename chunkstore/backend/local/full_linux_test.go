package local

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// A full disk is reported as such, leaves no partial object and no
// temporary file, and the backend works again once space is freed.
func TestPut_DiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to mount a small tmpfs; CI runs as root")
		}
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
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
