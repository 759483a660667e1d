package fs

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/journal"
)

// errnoTable maps the journal's sentinel errors to errnos: the one place in
// cairn where errors become errnos.
var errnoTable = []struct {
	err   error
	errno syscall.Errno
}{
	{journal.ErrNotFound, syscall.ENOENT},
	{journal.ErrExists, syscall.EEXIST},
	{journal.ErrNotDir, syscall.ENOTDIR},
	{journal.ErrIsDir, syscall.EISDIR},
	{journal.ErrNotEmpty, syscall.ENOTEMPTY},
	{journal.ErrInvalid, syscall.EINVAL},
	{journal.ErrNameTooLong, syscall.ENAMETOOLONG},
	{journal.ErrPermission, syscall.EPERM},
	{journal.ErrNoData, syscall.ENODATA},
	{journal.ErrRange, syscall.ERANGE},
	{journal.ErrTooBig, syscall.E2BIG},
	{journal.ErrFileTooBig, syscall.EFBIG},
	{journal.ErrNoSpace, syscall.ENOSPC},
	{journal.ErrNoXattrSpace, syscall.ENOSPC},
	{journal.ErrTooManyLinks, syscall.EMLINK},
	{journal.ErrNotSupported, syscall.EOPNOTSUPP},
	{journal.ErrStale, syscall.ESTALE},
	{journal.ErrBusy, syscall.EBUSY},
	{journal.ErrIO, syscall.EIO},
	{journal.ErrClosed, syscall.EIO},
	{journal.ErrBadFD, syscall.EBADF},
	{journal.ErrNoSeekData, syscall.ENXIO},
	{context.Canceled, syscall.EINTR},
}

// Errno maps an error from the journal to the errno the caller sees. Any
// error that wraps none of the journal's sentinels (a store failure, a
// bug) is EIO: never a success, never a panic.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, e := range errnoTable {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	return syscall.EIO
}

// status is Errno as a FUSE status.
func status(err error) fuse.Status {
	return fuse.Status(Errno(err))
}
