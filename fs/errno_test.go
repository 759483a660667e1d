package fs

import (
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/journal"
)

func TestErrno(t *testing.T) {
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{journal.ErrNotFound, syscall.ENOENT},
		{fmt.Errorf("lookup %q: %w", "x", journal.ErrNotFound), syscall.ENOENT},
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
		{fmt.Errorf("quota: %w", journal.ErrNoSpace), syscall.ENOSPC},
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
		// Anything else is EIO: a corrupt store object, a bug.
		{fmt.Errorf("read: %w", chunkstore.ErrCorrupt), syscall.EIO},
		{errors.New("unexpected"), syscall.EIO},
	} {
		if got := Errno(c.err); got != c.want {
			t.Errorf("Errno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// Every sentinel of the journal has a row.
	for _, e := range errnoTable {
		if Errno(e.err) != e.errno {
			t.Errorf("row %v shadowed by an earlier one", e.err)
		}
	}
}

func TestDevEncoding(t *testing.T) {
	for _, d := range []struct{ major, minor uint32 }{{1, 3}, {8, 17}, {259, 0}, {4095, 1048575}} {
		dev := unixMkdev(d.major, d.minor)
		if got := decodeDev(encodeDev(dev)); got != dev {
			t.Errorf("device %d:%d: round trip gives %#x, want %#x", d.major, d.minor, got, dev)
		}
	}
	// /dev/null is 1:3; the kernel's encoding is 0x103.
	if got := encodeDev(unixMkdev(1, 3)); got != 0x103 {
		t.Errorf("encodeDev(1:3) = %#x, want 0x103", got)
	}
}

var unixMkdev = unix.Mkdev
