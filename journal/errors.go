package journal

import "errors"

// Sentinel errors. Each stands for one Linux errno; package fs maps them
// (ErrNotFound -> ENOENT, ...). Errors returned by the journal wrap exactly
// one of these, or a chunkstore error for a store problem (-> EIO).
var (
	ErrNotFound     = errors.New("no such file or directory")        // ENOENT
	ErrExists       = errors.New("file exists")                      // EEXIST
	ErrNotDir       = errors.New("not a directory")                  // ENOTDIR
	ErrIsDir        = errors.New("is a directory")                   // EISDIR
	ErrNotEmpty     = errors.New("directory not empty")              // ENOTEMPTY
	ErrInvalid      = errors.New("invalid argument")                 // EINVAL
	ErrNameTooLong  = errors.New("file name too long")               // ENAMETOOLONG
	ErrPermission   = errors.New("operation not permitted")          // EPERM
	ErrNoData       = errors.New("no such attribute")                // ENODATA
	ErrRange        = errors.New("result too large")                 // ERANGE
	ErrTooBig       = errors.New("argument list too long")           // E2BIG (xattr value over the limit)
	ErrFileTooBig   = errors.New("file too large")                   // EFBIG
	ErrNoSpace      = errors.New("no space left on device")          // ENOSPC (quota or disk)
	ErrTooManyLinks = errors.New("too many links")                   // EMLINK
	ErrNotSupported = errors.New("operation not supported")          // EOPNOTSUPP
	ErrStale        = errors.New("stale file handle")                // ESTALE (after a forced rollback)
	ErrBusy         = errors.New("device or resource busy")          // EBUSY
	ErrIO           = errors.New("input/output error")               // EIO
	ErrNoXattrSpace = errors.New("no space for extended attributes") // ENOSPC for xattrs
	ErrClosed       = errors.New("journal closed")                   // EIO
	ErrBadFD        = errors.New("bad file descriptor")              // EBADF (no handle)
	ErrNoSeekData   = errors.New("no such device or address")        // ENXIO (SEEK_DATA/SEEK_HOLE past the end)
	ErrReadOnly     = errors.New("read-only file system")            // EROFS (the daemon lost its lease)
)
