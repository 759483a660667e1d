package journal_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"
)

// faultyFS wraps the real filesystem and fails named operations on staging
// files: "open", "read", "write", "truncate", "sync", "punch", "remove".
type faultyFS struct {
	mu    sync.Mutex
	fails map[string]error
}

func (f *faultyFS) fail(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails == nil {
		f.fails = map[string]error{}
	}
	f.fails[op] = err
}

func (f *faultyFS) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = nil
}

func (f *faultyFS) check(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fails[op]
}

func (f *faultyFS) OpenFile(name string, flag int, perm os.FileMode) (journal.File, error) {
	if err := f.check("open"); err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	file, err := journal.OSFS{}.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f}, nil
}

func (f *faultyFS) Remove(name string) error {
	if err := f.check("remove"); err != nil {
		return err
	}
	return os.Remove(name)
}

type faultyFile struct {
	journal.File
	fs *faultyFS
}

func (f *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check("read"); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check("write"); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultyFile) Truncate(n int64) error {
	if err := f.fs.check("truncate"); err != nil {
		return err
	}
	return f.File.Truncate(n)
}

func (f *faultyFile) Sync() error {
	if err := f.fs.check("sync"); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultyFile) PunchHole(off, n int64) error {
	if err := f.fs.check("punch"); err != nil {
		return err
	}
	return f.File.PunchHole(off, n)
}

func openFaulty(t *testing.T, e *env, dir string, fsys journal.FS) *journal.Journal {
	t.Helper()
	j, err := journal.Open(ctx, journal.Config{Dir: dir, Store: e.store, Workspace: "ws", Clock: e.clk.now, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func TestFault_Write(t *testing.T) {
	for _, tc := range []struct {
		op   string
		errn error
		want error
	}{
		{"write", syscall.ENOSPC, journal.ErrNoSpace},
		{"write", syscall.EIO, journal.ErrIO},
		{"truncate", syscall.ENOSPC, journal.ErrNoSpace},
		{"open", syscall.EIO, journal.ErrIO},
	} {
		t.Run(tc.op+"/"+tc.errn.Error(), func(t *testing.T) {
			e := newEnv(t)
			fsys := &faultyFS{}
			dir := t.TempDir()
			j := openFaulty(t, e, dir, fsys)
			f := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
			if _, err := j.Write(ctx, journal.Root, f.Ino, []byte("before"), 0); err != nil {
				t.Fatal(err)
			}
			fsys.fail(tc.op, tc.errn)
			var err error
			if tc.op == "truncate" {
				_, err = j.SetAttr(ctx, journal.Root, f.Ino, journal.SetAttrIn{Valid: journal.SetSize, Size: 1 << 20})
			} else {
				if tc.op == "open" {
					j.Close()
					j = openFaulty(t, e, dir, fsys)
				}
				_, err = j.Write(ctx, journal.Root, f.Ino, []byte("AFTER!"), 0)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.want == journal.ErrNoSpace && !strings.Contains(err.Error(), "full") {
				t.Errorf("error does not say the disk is full: %v", err)
			}
			fsys.heal()
			// Nothing changed, and the journal goes on.
			if got := readAll(t, j, f.Ino); string(got) != "before" {
				t.Fatalf("content after the failed write = %q, want %q", got, "before")
			}
			if _, err := j.Write(ctx, journal.Root, f.Ino, []byte("later"), 6); err != nil {
				t.Fatalf("write after healing: %v", err)
			}
			j.Close()
			j2 := openFaulty(t, e, dir, fsys)
			if got := readAll(t, j2, f.Ino); string(got) != "beforelater" {
				t.Fatalf("after reopen: %q", got)
			}
		})
	}
}

// A copy-up that fails leaves the file clean and readable from the store.
func TestFault_CopyUp(t *testing.T) {
	e := newEnv(t)
	j := e.open("ws", t.TempDir(), chunkstore.ID{})
	f := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "big", 0o644))
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	if _, err := j.Write(ctx, journal.Root, f.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	snap := must[chunkstore.ID](t)(j.Snapshot(ctx, journal.SnapshotOptions{}))
	fsys := &faultyFS{}
	j2 := openFaulty(t, e, t.TempDir(), fsys)
	a := must[journal.Attr](t)(j2.Lookup(ctx, journal.RootIno, "big"))
	fsys.fail("write", syscall.ENOSPC)
	if _, err := j2.Write(ctx, journal.Root, a.Ino, []byte("x"), 5); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("write needing a copy-up on a full disk: err = %v", err)
	}
	fsys.heal()
	if got := readAll(t, j2, a.Ino); !bytes.Equal(got, data) {
		t.Fatal("content changed after a failed copy-up")
	}
	if _, err := j2.Write(ctx, journal.Root, a.Ino, []byte("x"), 5); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), data...)
	want[5] = 'x'
	if got := readAll(t, j2, a.Ino); !bytes.Equal(got, want) {
		t.Fatal("write after a failed copy-up is wrong")
	}
	_ = snap
}

func TestFault_Fsync(t *testing.T) {
	e := newEnv(t)
	fsys := &faultyFS{}
	j := openFaulty(t, e, t.TempDir(), fsys)
	f := must[journal.Attr](t)(j.Create(ctx, journal.Root, journal.RootIno, "f", 0o644))
	if _, err := j.Write(ctx, journal.Root, f.Ino, []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	fsys.fail("sync", syscall.EIO)
	if err := j.Fsync(ctx, f.Ino, false); !errors.Is(err, journal.ErrIO) {
		t.Fatalf("fsync with a failing disk: err = %v, want ErrIO", err)
	}
}
