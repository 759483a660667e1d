package fs

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/internal/testenv"
	"github.com/cairnfs/cairn/journal"
)

// slowWrites answers each WRITE late, as a busy daemon does: a flush that
// does not wait for the answers returns before the journal has the data.
type slowWrites struct {
	*FS
	delay time.Duration
}

func (s *slowWrites) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	time.Sleep(s.delay)
	return s.FS.Write(c, in, data)
}

// The pages of a file mapped shared and dirtied, without passthrough, are
// in the journal once WaitWriteback returns, the file still mapped and
// open; an inode the kernel does not hold is no error.
func TestWaitWriteback(t *testing.T) {
	testenv.NeedRoot(t, "FUSE mounts", true)
	st := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
	j, err := journal.Open(context.Background(), journal.Config{Dir: t.TempDir(), Store: st, Workspace: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	s := &slowWrites{FS: New(j, Options{NoPassthrough: true}), delay: 100 * time.Millisecond}
	dir, _ := mountRaw(t, s, s.FS.opts, j)
	if got := s.KernelMayHoldWrites(); len(got) != 0 {
		t.Fatalf("KernelMayHoldWrites with nothing open: %v", got)
	}
	// The mapping is another process's (see mapDirty): the helper of
	// helper_linux_test.go, which TestMain runs.
	const size, text = 4 << 20, "mapped and dirty\n"
	path := filepath.Join(dir, "m")
	cmd := exec.Command(os.Args[0], path, strconv.Itoa(size), text)
	cmd.Env = []string{"CAIRN_FS_TEST_HELPER=mapdirty"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the mapping helper: %v: %s", err, stderr.String())
		}
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the mapping helper said %q (%v): %s", line, err, stderr.String())
	}
	want := bytes.Repeat([]byte(text), size/len(text)+1)[:size]
	var sb unix.Stat_t
	if err := unix.Stat(path, &sb); err != nil {
		t.Fatal(err)
	}
	inodes := s.KernelMayHoldWrites()
	if len(inodes) != 1 || inodes[0].NodeID != sb.Ino {
		t.Fatalf("KernelMayHoldWrites = %v, want inode %d", inodes, sb.Ino)
	}
	mnt, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer mnt.Close()
	done := s.FlushHelper(os.Getpid())
	err = WaitWriteback(mnt, inodes[0])
	done()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	n, err := j.Read(context.Background(), journal.Ino(sb.Ino), got, 0)
	if err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(got[:n], want); i >= 0 {
		t.Fatalf("the journal holds %d bytes after WaitWriteback, the first different at offset %d (%q), want the mapped writes", n, i, got[i:min(i+16, n)])
	}
	for _, gone := range []KernelInode{{NodeID: 1 << 40, Generation: inodes[0].Generation}, {NodeID: inodes[0].NodeID, Generation: inodes[0].Generation + 1}} {
		if err := WaitWriteback(mnt, gone); err != nil {
			t.Errorf("WaitWriteback of %v, which the kernel does not hold: %v", gone, err)
		}
	}
}

// firstDiff returns the first offset where a and b differ, -1 if none.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// A flush helper's threads are told from others while it is declared.
func TestFromFlusher(t *testing.T) {
	f := New(nil, Options{})
	tid := uint32(unix.Gettid())
	if f.fromFlusher(tid) {
		t.Fatal("a thread counts as a flush helper's before any is declared")
	}
	done := f.FlushHelper(os.Getpid())
	if !f.fromFlusher(tid) {
		t.Error("a thread of the declared helper does not count as one")
	}
	if f.fromFlusher(0) || f.fromFlusher(uint32(os.Getppid())) {
		t.Error("pid 0 or another process counts as the helper's")
	}
	done()
	if f.fromFlusher(tid) {
		t.Error("a thread counts as a flush helper's after done")
	}
}
