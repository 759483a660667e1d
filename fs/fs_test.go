package fs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
func mount(t testing.TB, opts fs.Options) (string, *journal.Journal) {
	t.Helper()
	testenv.NeedRoot(t, "FUSE mounts", true)
	dir, j, _ := mountAt(t, t.TempDir(), opts)
	return dir, j
}

// publicDir returns a new directory that every user may search (those of
// t.TempDir may not), removed when the test ends.
func publicDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cairn-fs-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mountAt serves a fresh journal at dir until the test ends.
func mountAt(t testing.TB, dir string, opts fs.Options) (string, *journal.Journal, *fs.FS) {
	t.Helper()
	testenv.NeedRoot(t, "FUSE mounts", true)
	st := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
	j, err := journal.Open(context.Background(), journal.Config{Dir: t.TempDir(), Store: st, Workspace: "ws"})
	if err != nil {
		t.Fatal(err)
	}
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
	return dir, j, f
}

// go-fuse's POSIX suite, with and without passthrough, and with id-mapped
// binds allowed (through the plain mount: every request but the creating
// ones finds its caller in /proc).
func TestPosix(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts fs.Options
	}{{"passthrough", fs.Options{}}, {"daemon-io", fs.Options{NoPassthrough: true}}, {"idmap", fs.Options{IDMap: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			for name, test := range posixtest.All {
				if name == "FcntlFlockLocksFile" {
					// Expects two F_SETLK locks of one process to
					// conflict; POSIX says they never do, ext4 agrees,
					// and go-fuse's own TestAll leaves it out.
					continue
				}
				t.Run(name, func(t *testing.T) {
					dir, _, f := mountAt(t, t.TempDir(), mode.opts)
					if mode.opts.IDMap {
						needIDMap(t, f)
					}
					test(t, dir)
				})
			}
		})
	}
}

// TestReadDirPlus_Attrs: a listing with attributes (READDIRPLUS, which the
// kernel uses for a directory it has not seen) gives each entry its own
// attributes, across the batches the daemon looks them up in and the
// several requests a large directory takes. The entries are made through
// the journal, so the kernel learns of them only from the listing.
func TestReadDirPlus_Attrs(t *testing.T) {
	dir, j := mount(t, fs.Options{})
	ctx := context.Background()
	d, err := j.Mkdir(ctx, journal.Root, journal.RootIno, "big", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	want := map[string]journal.Attr{}
	for i := range n {
		name := fmt.Sprintf("f%04d-%s", i, strings.Repeat("x", i%200))
		a, err := j.Create(ctx, journal.Root, d.Ino, name, 0o600|uint32(i%2)*0o044)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Write(ctx, journal.Root, a.Ino, make([]byte, i), 0); err != nil {
			t.Fatal(err)
		}
		want[name] = a
	}
	ents, err := os.ReadDir(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(ents); got != n {
		t.Fatalf("listed %d entries, want %d", got, n)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		w := want[e.Name()]
		var i int
		fmt.Sscanf(e.Name(), "f%04d", &i)
		if st.Ino != uint64(w.Ino) || fi.Size() != int64(i) || st.Mode&0o777 != 0o600|uint32(i%2)*0o044 {
			t.Fatalf("%s: ino %d size %d mode %o, want ino %d size %d mode %o", e.Name(), st.Ino, fi.Size(), st.Mode&0o777, w.Ino, i, 0o600|uint32(i%2)*0o044)
		}
	}
}
