package fs_test

import (
	"context"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/fs"
	"github.com/cairnfs/cairn/journal"

	"github.com/cairnfs/cairn/internal/testenv"
)

// mount serves a fresh journal at a temporary directory until the test
// ends.
func mount(t *testing.T, opts fs.Options) (string, *journal.Journal) {
	t.Helper()
	testenv.NeedRoot(t, "FUSE mounts", true)
	st := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
	j, err := journal.Open(context.Background(), journal.Config{Dir: t.TempDir(), Store: st, Workspace: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := fs.New(j, opts)
	srv, err := fs.Mount(dir, f, "cairn-test")
	if err != nil {
		j.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		srv.Wait()
		j.Close()
	})
	return dir, j
}

// go-fuse's POSIX suite, with and without passthrough.
func TestPosix(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts fs.Options
	}{{"passthrough", fs.Options{}}, {"daemon-io", fs.Options{NoPassthrough: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			for name, test := range posixtest.All {
				if name == "FcntlFlockLocksFile" {
					// Expects two F_SETLK locks of one process to
					// conflict; POSIX says they never do, ext4 agrees,
					// and go-fuse's own TestAll leaves it out.
					continue
				}
				t.Run(name, func(t *testing.T) {
					dir, _ := mount(t, mode.opts)
					test(t, dir)
				})
			}
		})
	}
}
