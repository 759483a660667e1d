package journal

import (
	"os"

	"golang.org/x/sys/unix"
)

func punchHole(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// openFile is os.OpenFile for a staging file (a regular file) without the
// runtime poller: os.OpenFile tries to register every file it opens with
// epoll, a failing epoll_ctl(2) for a regular file on each open, where
// os.NewFile of a blocking descriptor registers nothing.
func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		switch err {
		case nil:
			return os.NewFile(uintptr(fd), name), nil
		case unix.EINTR:
			continue
		}
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
}
