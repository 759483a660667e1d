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

// TestReadDir_ChangeWhileReading: a directory read in small pieces while
// names come and go through the mount gives every name that was there all
// along exactly once, and a rewind gives the directory as it is (the
// handle's listing is read again at offset 0 and after each change).
func TestReadDir_ChangeWhileReading(t *testing.T) {
	dir, _ := mount(t, fs.Options{})
	d := filepath.Join(dir, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 600
	for i := range n {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("keep%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n / 2 {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("gone%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := syscall.Open(d, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	read := func(changes func(round int)) map[string]int {
		t.Helper()
		if _, err := syscall.Seek(fd, 0, 0); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		buf := make([]byte, 1024) // a few entries per getdents
		for round := 0; ; round++ {
			nb, err := syscall.Getdents(fd, buf)
			if err != nil {
				t.Fatal(err)
			}
			if nb == 0 {
				return seen
			}
			var names []string
			_, _, names = syscall.ParseDirent(buf[:nb], -1, names)
			for _, name := range names {
				seen[name]++
			}
			if changes != nil {
				changes(round)
			}
		}
	}
	changed := 0
	seen := read(func(round int) {
		// Each round: some names removed, as many added.
		for k := 0; k < 10 && changed < n/2; k++ {
			if err := os.Remove(filepath.Join(d, fmt.Sprintf("gone%03d", changed))); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("new%03d", changed)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			changed++
		}
	})
	if changed < 100 {
		t.Fatalf("only %d changes while reading: the pieces are too large", changed)
	}
	for i := range n {
		if name := fmt.Sprintf("keep%03d", i); seen[name] != 1 {
			t.Errorf("%s listed %d times while others changed", name, seen[name])
		}
	}
	for name, c := range seen {
		if c != 1 {
			t.Errorf("%s listed %d times", name, c)
		}
	}
	// Rewound, and in a new listing: the directory as it is now.
	want := map[string]int{}
	for i := range n {
		want[fmt.Sprintf("keep%03d", i)] = 1
	}
	for i := range n / 2 {
		if i < changed {
			want[fmt.Sprintf("new%03d", i)] = 1
		} else {
			want[fmt.Sprintf("gone%03d", i)] = 1
		}
	}
	got := read(nil)
	delete(got, ".")
	delete(got, "..")
	diffNames(t, "rewound listing", got, want)
	now, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	got = map[string]int{}
	for _, e := range now {
		got[e.Name()]++
	}
	diffNames(t, "new listing", got, want)
}

func diffNames(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	for name, c := range got {
		if c != want[name] {
			t.Errorf("%s: %s %d times, want %d", what, name, c, want[name])
		}
	}
	for name, c := range want {
		if got[name] == 0 {
			t.Errorf("%s: %s missing, want %d", what, name, c)
		}
	}
}
