package journal

import (
	"os"

	"golang.org/x/sys/unix"
)

// diskFree returns the bytes available to the process on dir's disk.
func diskFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// allocate gives the first size bytes of the file at path blocks on the
// disk (creating the file if missing). keepSize: the file's size stays.
func allocate(path string, size int64, keepSize bool) error {
	flags := os.O_RDWR
	mode := uint32(0)
	if keepSize {
		mode = unix.FALLOC_FL_KEEP_SIZE
	} else {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fallocate(int(f.Fd()), mode, 0, size)
}
