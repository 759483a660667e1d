package fusetrace

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/testenv"
)

// TestCounter_Statfs counts the requests of a real go-fuse loopback mount:
// statfs always reaches the server, once per call.
func TestCounter_Statfs(t *testing.T) {
	testenv.NeedRoot(t, "BPF and a FUSE mount", true)
	c, err := Open()
	if errors.Is(err, ErrNotSupported) && os.Getenv("CI") != "true" {
		t.Skipf("the kernel cannot count FUSE requests here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	backing, mnt := filepath.Join(t.TempDir(), "b"), filepath.Join(t.TempDir(), "m")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gofs.Mount(mnt, root, &gofs.Options{MountOptions: fuse.MountOptions{DirectMount: true, Name: "fusetrace-test"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Unmount(); srv.Wait() })
	dev, err := DevOf(mnt)
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Counts(dev)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var st unix.Statfs_t
	for range n {
		if err := unix.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
	}
	after, err := c.Counts(dev)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if got := d.Ops["FUSE_STATFS"]; got != n {
		t.Errorf("FUSE_STATFS counted %d times, want %d (all: %v)", got, n, d.Ops)
	}
	if d.Replies < n {
		t.Errorf("%d replies, want at least %d", d.Replies, n)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// Detached: more requests are not counted (the map is gone; a new
	// counter starts from zero).
	c2, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	if got, err := c2.Counts(dev); err != nil || got.Ops["FUSE_STATFS"] != 1 {
		t.Errorf("a new counter after one statfs: %v, %v; want FUSE_STATFS 1", got.Ops, err)
	}
}
