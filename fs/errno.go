package fs

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

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
	{journal.ErrReadOnly, syscall.EROFS},
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

// status is Errno as a FUSE status. An EIO (a store that cannot be read,
// a damaged journal) is logged, naming what failed: the caller only sees
// EIO. At most ioLogBurst lines a second; the rest are counted.
func (f *FS) status(err error) fuse.Status {
	e := Errno(err)
	if e == syscall.EIO {
		f.ioLog.log(f.opts.Logf, err)
	}
	return fuse.Status(e)
}

const ioLogBurst = 10

// ioLog rate-limits the log lines of I/O errors.
type ioLog struct {
	now     func() time.Time // default: time.Now
	mu      sync.Mutex
	second  time.Time
	n       int
	dropped int
}

func (l *ioLog) log(logf func(string, ...any), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	clock := l.now
	if clock == nil {
		clock = time.Now
	}
	now := clock().Truncate(time.Second)
	if !now.Equal(l.second) {
		if l.dropped > 0 {
			logf("cairn: %d more I/O errors not logged", l.dropped)
		}
		l.second, l.n, l.dropped = now, 0, 0
	}
	if l.n++; l.n > ioLogBurst {
		l.dropped++
		return
	}
	logf("cairn: I/O error (the caller got EIO): %v", err)
}
