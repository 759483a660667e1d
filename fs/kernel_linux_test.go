package fs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/internal/testenv"
	"github.com/cairnfs/cairn/journal"
)

// TestReadCreds: this thread's own credentials, as the daemon reads a
// caller's.
func TestReadCreds(t *testing.T) {
	self, err := readCreds(uint32(unix.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	if self.uid != uint32(os.Getuid()) || self.gid != uint32(os.Getgid()) {
		t.Fatalf("own credentials %+v, want uid %d gid %d", self, os.Getuid(), os.Getgid())
	}
}

// headerLog records the header of each request that passes a caller to the
// journal.
type headerLog struct {
	*FS
	mu   sync.Mutex
	seen map[string]fuse.InHeader
}

func (l *headerLog) note(op string, h *fuse.InHeader) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[op]; !ok {
		l.seen[op] = *h
	}
}

func (l *headerLog) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	l.note("create", &in.InHeader)
	return l.FS.Create(c, in, name, out)
}

func (l *headerLog) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	l.note("mkdir", &in.InHeader)
	return l.FS.Mkdir(c, in, name, out)
}

func (l *headerLog) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	l.note("mknod", &in.InHeader)
	return l.FS.Mknod(c, in, name, out)
}

func (l *headerLog) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	l.note("symlink", h)
	return l.FS.Symlink(c, h, target, name, out)
}

func (l *headerLog) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	l.note("link", &in.InHeader)
	return l.FS.Link(c, in, name, out)
}

func (l *headerLog) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	l.note("rename", &in.InHeader)
	return l.FS.Rename(c, in, oldName, newName)
}

func (l *headerLog) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	l.note("unlink", h)
	return l.FS.Unlink(c, h, name)
}

func (l *headerLog) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	l.note("rmdir", h)
	return l.FS.Rmdir(c, h, name)
}

func (l *headerLog) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	l.note("setattr", &in.InHeader)
	return l.FS.SetAttr(c, in, out)
}

func (l *headerLog) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, name string, data []byte) fuse.Status {
	l.note("setxattr", &in.InHeader)
	return l.FS.SetXAttr(c, in, name, data)
}

func (l *headerLog) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	l.note("write", &in.InHeader)
	return l.FS.Write(c, in, data)
}

func (l *headerLog) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	l.note("fallocate", &in.InHeader)
	return l.FS.Fallocate(c, in)
}

// What the kernel puts in request headers through the plain mount of a
// server that declared FUSE_ALLOW_IDMAP (and of one that did not): the
// caller's ids in creating requests only, FUSE_INVALID_UIDGID in the
// others; the pid (a thread of the caller) in all of them.
func TestKernelHeaders(t *testing.T) {
	testenv.NeedRoot(t, "FUSE mounts", true)
	creating := map[string]bool{"create": true, "mkdir": true, "mknod": true, "symlink": true}
	for _, idmap := range []bool{false, true} {
		t.Run("idmap="+strconv.FormatBool(idmap), func(t *testing.T) {
			st := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
			j, err := journal.Open(context.Background(), journal.Config{Dir: t.TempDir(), Store: st, Workspace: "ws"})
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{IDMap: idmap, NoPassthrough: true}
			l := &headerLog{FS: New(j, opts), seen: map[string]fuse.InHeader{}}
			dir, srv := mountRaw(t, l, l.FS.opts, j)
			offered := srv.KernelSettings().Flags64()&fuse.CAP_ALLOW_IDMAP != 0
			if idmap && !offered {
				needKernel(t, "FUSE_ALLOW_IDMAP (Linux 6.12)")
			}
			if got, want := l.IDMapped(), idmap; got != want {
				t.Fatalf("IDMapped() = %v, want %v", got, want)
			}
			p := func(name string) string { return filepath.Join(dir, name) }
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(os.WriteFile(p("f"), []byte("x"), 0o644))
			must(os.Mkdir(p("d"), 0o755))
			must(unix.Mknod(p("fifo"), syscall.S_IFIFO|0o644, 0))
			must(os.Symlink("f", p("l")))
			must(os.Link(p("f"), p("g")))
			must(os.Rename(p("g"), p("h")))
			must(os.Chmod(p("f"), 0o600))
			must(unix.Setxattr(p("f"), "user.x", []byte("1"), 0))
			must(unix.Fallocate(mustOpen(t, p("f")), 0, 0, 10))
			must(os.Remove(p("h")))
			must(os.Remove(p("d")))
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, op := range []string{"create", "mkdir", "mknod", "symlink", "link", "rename", "setattr", "setxattr", "write", "fallocate", "unlink", "rmdir"} {
				h, ok := l.seen[op]
				if !ok {
					t.Errorf("%s: no request", op)
					continue
				}
				want := uint32(0)
				if idmap && !creating[op] {
					want = invalidID
				}
				if h.Uid != want || h.Gid != want {
					t.Errorf("%s: header uid %d gid %d, want %d", op, h.Uid, h.Gid, want)
				}
				if tgid := tgidOf(h.Pid); tgid != os.Getpid() {
					t.Errorf("%s: header pid %d is a thread of %d, not of this process (%d)", op, h.Pid, tgid, os.Getpid())
				}
			}
		})
	}
}

func mustOpen(t *testing.T, path string) int {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// tgidOf returns the process of thread tid (0 if unknown).
func tgidOf(tid uint32) int {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// One read of a thread's credentials: what a request costs when its
// thread is not in the cache (once a second per thread).
func BenchmarkReadCreds(b *testing.B) {
	tid := uint32(unix.Gettid())
	for range b.N {
		if _, err := readCreds(tid); err != nil {
			b.Fatal(err)
		}
	}
}
