package journal

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// checkInodeQuota fails with ErrNoSpace if adding n inodes would exceed
// MaxInodes, and logs which limit was hit.
func (j *Journal) checkInodeQuota(n uint64) error {
	if j.cfg.MaxInodes == 0 || j.m.inodes()+n <= j.cfg.MaxInodes {
		return nil
	}
	j.cfg.Logf("workspace %q: inode quota of %d reached (%d in use); the operation failed with ENOSPC", j.cfg.Workspace, j.cfg.MaxInodes, j.m.inodes())
	return fmt.Errorf("workspace %q has reached its quota of %d inodes: %w", j.cfg.Workspace, j.cfg.MaxInodes, ErrNoSpace)
}

// checkBytesQuota fails with ErrNoSpace if a file growing from oldSize to
// newSize would take the workspace past MaxBytes. Shrinking always passes.
func (j *Journal) checkBytesQuota(oldSize, newSize uint64) error {
	if j.cfg.MaxBytes == 0 || newSize <= oldSize || j.m.Bytes+(newSize-oldSize) <= j.cfg.MaxBytes {
		return nil
	}
	j.cfg.Logf("workspace %q: byte quota of %d reached (%d in use); the operation failed with ENOSPC", j.cfg.Workspace, j.cfg.MaxBytes, j.m.Bytes)
	return fmt.Errorf("workspace %q has reached its quota of %d bytes: %w", j.cfg.Workspace, j.cfg.MaxBytes, ErrNoSpace)
}

// StatFs reports the workspace's capacity: its quotas where set, otherwise
// the space of the disk that holds the journal.
func (j *Journal) StatFs(ctx context.Context) (StatFs, error) {
	if err := j.lockAll(); err != nil {
		return StatFs{}, err
	}
	defer j.mu.Unlock()
	const bsize = 4096
	var st unix.Statfs_t
	if err := unix.Statfs(j.cfg.Dir, &st); err != nil {
		return StatFs{}, fmt.Errorf("%w: statfs of the journal's disk: %v", ErrIO, err)
	}
	diskFree := st.Bavail * uint64(st.Bsize)
	used := j.m.Bytes
	total := used + diskFree
	if j.cfg.MaxBytes > 0 {
		total = j.cfg.MaxBytes
	}
	free := total - min(total, used)
	out := StatFs{Bsize: bsize, NameLen: NameMax,
		Blocks: total / bsize, Bfree: free / bsize, Bavail: free / bsize,
		Files: st.Files, Ffree: st.Ffree}
	if j.cfg.MaxInodes > 0 {
		out.Files = j.cfg.MaxInodes
		out.Ffree = j.cfg.MaxInodes - min(j.cfg.MaxInodes, j.m.inodes())
	}
	return out, nil
}
