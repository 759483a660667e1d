package fs

import (
	"os"
	"strconv"

	"github.com/cairnfs/cairn/journal"
)

// KernelInode is an inode as the kernel knows it: its FUSE node ID and
// generation (what a FUSE file handle holds; see WaitWriteback).
type KernelInode struct {
	NodeID     uint64
	Generation uint64
}

// KernelMayHoldWrites returns the inodes whose writes the kernel may hold
// without having sent them to the daemon, so that a commit must flush them
// first (WaitWriteback, from another process). The mount has no writeback
// cache: write(2) without passthrough is sent to the daemon before it
// returns, and writes through passthrough go to the backing (staging)
// file itself. What is left are pages dirtied through a shared writable
// mapping of a file opened for writing without passthrough; the mapping
// keeps the file open (the kernel writes its pages back when it is
// unmapped, before the release), so only the inodes of such open files
// can have dirty pages. Handles opened before a forced rollback are left
// out: their writes fail with ESTALE.
func (f *FS) KernelMayHoldWrites() []KernelInode {
	f.mu.Lock()
	if f.cachedWriters == 0 {
		f.mu.Unlock()
		return nil
	}
	var hs []*journal.Handle
	for _, of := range f.files {
		if of.cachedWrite {
			hs = append(hs, of.h)
		}
	}
	f.mu.Unlock()
	var out []KernelInode
	seen := make(map[KernelInode]bool, len(hs))
	for _, h := range hs {
		n := KernelInode{NodeID: uint64(h.Ino), Generation: h.Generation()}
		if !seen[n] && !f.j.Stale(h) {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// FlushHelper declares process pid a flush helper (WaitWriteback) until
// done is called. Its fsync(2) of a file reaches the daemon as FSYNC only
// once the kernel has had every WRITE of the file's dirty pages answered,
// which is all it is for: it is answered at once, without the journal's
// fsync, which would write the staging file to disk (a snapshot does not
// need that) holding the journal's lock meanwhile. Declare the helper
// before it can make requests.
func (f *FS) FlushHelper(pid int) (done func()) {
	f.mu.Lock()
	if f.flushers == nil {
		f.flushers = make(map[int]int)
	}
	f.flushers[pid]++
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.flushers[pid]--; f.flushers[pid] == 0 {
			delete(f.flushers, pid)
		}
		f.mu.Unlock()
	}
}

// fromFlusher reports whether thread tid (a request's pid: the kernel
// sends the thread's id) is one of a flush helper's.
func (f *FS) fromFlusher(tid uint32) bool {
	f.mu.Lock()
	if len(f.flushers) == 0 || tid == 0 {
		f.mu.Unlock()
		return false
	}
	pids := make([]int, 0, len(f.flushers))
	for pid := range f.flushers {
		pids = append(pids, pid)
	}
	f.mu.Unlock()
	for _, pid := range pids {
		// A thread's directory is under its process's task/.
		if _, err := os.Lstat("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.FormatUint(uint64(tid), 10)); err == nil {
			return true
		}
	}
	return false
}
