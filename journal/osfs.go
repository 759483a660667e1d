package journal

import "os"

// FS is the journal's seam to the local filesystem for staging files: every
// staging-file operation goes through it, named, so that tests can inject
// faults (ENOSPC, EIO) at chosen steps. Production code uses OSFS.
type FS interface {
	// OpenFile opens a staging file (os.OpenFile's contract).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a staging file.
	Remove(name string) error
}

// File is an open staging file.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
	// PunchHole deallocates [off, off+n), which then reads as zeros.
	PunchHole(off, n int64) error
	// Seek is lseek(2); the journal uses it only with SEEK_DATA and
	// SEEK_HOLE, to find a staging file's holes (it reads and writes at
	// explicit offsets, so the file offset does not matter).
	Seek(off int64, whence int) (int64, error)
}

// OSFS is the real filesystem.
type OSFS struct{}

// OpenFile implements FS (with openFile: one open(2), no more).
func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := openFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

type osFile struct{ *os.File }

// PunchHole implements File (osfs_linux.go; elsewhere ErrNotSupported, and
// the journal writes zeros instead).
func (f osFile) PunchHole(off, n int64) error { return punchHole(f.File, off, n) }
