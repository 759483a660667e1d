package fs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/fs"
	"github.com/cairnfs/cairn/journal"

	"github.com/cairnfs/cairn/internal/fuseuring"
	"github.com/cairnfs/cairn/internal/testenv"
)

// openJournal opens a fresh journal, closed when the test ends.
func openJournal(t testing.TB) *journal.Journal {
	t.Helper()
	st := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
	j, err := journal.Open(context.Background(), journal.Config{Dir: t.TempDir(), Store: st, Workspace: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// mountServer serves j at a new directory until the test ends (or the
// caller unmounts it).
func mountServer(t testing.TB, j *journal.Journal, opts fs.Options) (string, *fs.Server) {
	t.Helper()
	dir := t.TempDir()
	srv, err := fs.Mount(dir, fs.New(j, opts), "cairn-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return dir, srv
}

// The POSIX suite served through io_uring, with and without passthrough;
// every request but FORGET and INTERRUPT goes through the ring.
func TestTransport_URingPosix(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts fs.Options
	}{{"passthrough", fs.Options{Transport: fs.TransportURing}}, {"daemon-io", fs.Options{Transport: fs.TransportURing, NoPassthrough: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			testenv.NeedFUSEURing(t)
			for name, test := range posixtest.All {
				if name == "FcntlFlockLocksFile" {
					continue // a wrong expectation: see TestPosix
				}
				t.Run(name, func(t *testing.T) {
					dir, srv := mountServer(t, openJournal(t), mode.opts)
					if got, want := srv.Transport(), fs.TransportNameURing; got != want {
						t.Fatalf("transport %q, want %q", got, want)
					}
					before := srv.RingRequests()
					test(t, dir)
					if srv.RingRequests() == before {
						t.Errorf("no request was served through the ring")
					}
				})
			}
		})
	}
}

// Reads and writes through the ring: large writes (1 MiB requests) and
// reads without passthrough, and a passthrough file that another process
// sees the size of, and that is read back after a remount.
func TestTransport_URingData(t *testing.T) {
	testenv.NeedFUSEURing(t)
	data := make([]byte, 5<<20+123)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	for _, noPassthrough := range []bool{false, true} {
		j := openJournal(t)
		dir, srv := mountServer(t, j, fs.Options{Transport: fs.TransportURing, NoPassthrough: noPassthrough})
		f := fs.New(j, fs.Options{}) // only for Passthrough's answer below
		_ = f
		p := filepath.Join(dir, "big")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != int64(len(data)) {
			t.Fatalf("size %d, want %d", st.Size(), len(data))
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("passthrough=%v: read back differs", !noPassthrough)
		}
		if srv.Transport() != fs.TransportNameURing || srv.RingRequests() == 0 {
			t.Fatalf("transport %s, %d ring requests", srv.Transport(), srv.RingRequests())
		}
		if err := srv.Unmount(); err != nil {
			t.Fatal(err)
		}
		// Served again (through /dev/fuse), the file is as written.
		dir2, _ := mountServer(t, j, fs.Options{Transport: fs.TransportDev})
		got, err = os.ReadFile(filepath.Join(dir2, "big"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("passthrough=%v: read back after remount differs", !noPassthrough)
		}
	}
}

// Unmounting a mount served through io_uring, its entries registered and
// waiting for requests, leaves no descriptor (rings, eventfd, /dev/fuse),
// mapped entry buffers, goroutine or mount behind.
func TestTransport_URingCleanUp(t *testing.T) {
	testenv.NeedFUSEURing(t)
	j := openJournal(t)
	fds0, g0, maps0 := openFDs(t), runtime.NumGoroutine(), fuseuring.BuffersMapped()
	for range 3 {
		dir, srv := mountServer(t, j, fs.Options{Transport: fs.TransportURing})
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if fuseuring.BuffersMapped() <= maps0 {
			t.Errorf("no ring entry's buffers mapped while the mount serves")
		}
		if err := srv.Unmount(); err != nil {
			t.Fatal(err)
		}
		srv.Wait()
		if mounted(t, dir) {
			t.Fatalf("%s is still mounted", dir)
		}
	}
	if fds := openFDs(t); fds != fds0 {
		t.Errorf("%d descriptors open, %d before: %s", fds, fds0, fdList(t))
	}
	if n := fuseuring.BuffersMapped(); n != maps0 {
		t.Errorf("%d ring entries' buffers mapped after the unmounts, %d before", n, maps0)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines, %d before:\n%s", g, g0, buf[:runtime.Stack(buf, true)])
	}
}

// With FUSE over io_uring off in the kernel, auto serves through
// /dev/fuse (and says so), and uring refuses with one line that says why.
func TestTransport_Fallback(t *testing.T) {
	testenv.NoFUSEURing(t)
	j := openJournal(t)
	dir, srv := mountServer(t, j, fs.Options{Transport: fs.TransportAuto})
	if got, want := srv.Transport(), fs.TransportNameDev; got != want {
		t.Errorf("auto: transport %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if srv.RingRequests() != 0 {
		t.Errorf("%d requests through a ring that should not be there", srv.RingRequests())
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}

	dir2 := t.TempDir()
	_, err := fs.Mount(dir2, fs.New(j, fs.Options{Transport: fs.TransportURing}), "cairn-test")
	if !errors.Is(err, fs.ErrTransport) {
		t.Fatalf("uring without io_uring: %v, want ErrTransport", err)
	}
	t.Logf("uring refused: %v", err)
	if mounted(t, dir2) {
		t.Errorf("a refused mount stayed at %s", dir2)
	}
}

// openFDs counts the descriptors a transport may leave: /dev/fuse, rings
// and eventfds (the journal keeps staging files open by itself).
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if l == "/dev/fuse" || strings.HasPrefix(l, "anon_inode:") {
			n++
		}
	}
	return n
}

func mounted(t testing.TB, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(" "+dir+" "))
}

func fdList(t testing.TB) string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"="+l)
	}
	return strings.Join(out, " ")
}
