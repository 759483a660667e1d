package model

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/journal"
)

// regular returns a live regular file; a directory gives ErrIsDir, another
// type ErrInvalid (read(2) on a directory says EISDIR; other types never
// reach a filesystem's read).
func (m *Model) regular(ino journal.Ino, op string) (*inode, error) {
	n, err := m.get(ino)
	if err != nil {
		return nil, err
	}
	switch n.attr.Type {
	case journal.TypeRegular:
		return n, nil
	case journal.TypeDir:
		return nil, fmt.Errorf("%s directory %d: %w", op, ino, journal.ErrIsDir)
	default:
		return nil, fmt.Errorf("%s %v %d: %w", op, n.attr.Type, ino, journal.ErrInvalid)
	}
}

// Read reads up to len(p) bytes at off: a short count at the end of the
// file, 0 at or beyond it. Holes read as zeros. It does not change atime
// (the mount behaves as noatime). A negative off gives ErrInvalid, before
// the type check (as pread(2)).
func (m *Model) Read(ctx context.Context, ino journal.Ino, p []byte, off int64) (int, error) {
	if _, err := m.get(ino); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("read %d at %d: %w", ino, off, journal.ErrInvalid)
	}
	n, err := m.regular(ino, "read")
	if err != nil {
		return 0, err
	}
	size := int64(n.attr.Size)
	if off >= size {
		return 0, nil
	}
	cnt := min(int64(len(p)), size-off)
	n.data.readAt(p[:cnt], off)
	return int(cnt), nil
}

// Write writes p at off, extending the file (with a hole before off if
// off is beyond the end). As write(2): an empty p changes nothing; a
// write starting at or beyond FileSizeMax gives ErrFileTooBig and one
// crossing it is short; a negative off ErrInvalid, before the type check. It sets mtime and ctime and, for an unprivileged
// caller, clears setuid/setgid like Linux's file_remove_privs.
func (m *Model) Write(ctx context.Context, c journal.Caller, ino journal.Ino, p []byte, off int64) (int, error) {
	if _, err := m.get(ino); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("write %d at %d: %w", ino, off, journal.ErrInvalid)
	}
	n, err := m.regular(ino, "write")
	if err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= journal.FileSizeMax {
		return 0, fmt.Errorf("write %d at %d: %w", ino, off, journal.ErrFileTooBig)
	}
	p = p[:min(int64(len(p)), journal.FileSizeMax-off)]
	m.write(c, n, p, off, m.clock())
	return len(p), nil
}

func (m *Model) write(c journal.Caller, n *inode, p []byte, off, now int64) {
	n.data.writeAt(p, off)
	if end := uint64(off) + uint64(len(p)); end > n.attr.Size {
		n.attr.Size = end
	}
	n.attr.Mtime, n.attr.Ctime = now, now
	killPriv(c, n)
}

// Fallocate follows fallocate(2) on a filesystem supporting PUNCH_HOLE and
// ZERO_RANGE:
//
//   - off < 0 or length <= 0: ErrInvalid;
//   - unknown mode bits, PUNCH_HOLE with ZERO_RANGE, PUNCH_HOLE without
//     KEEP_SIZE: ErrNotSupported (Linux says EOPNOTSUPP for all three);
//   - a directory: ErrIsDir; another non-regular file: ErrNotSupported
//     (Linux: ENODEV, ESPIPE for a FIFO; the kernel never forwards these);
//   - off+length beyond FileSizeMax: ErrFileTooBig.
//
// Mode 0 extends the size to off+length if larger; KEEP_SIZE changes no
// visible state; PUNCH_HOLE|KEEP_SIZE zeros the range inside the file;
// ZERO_RANGE zeros it and extends the size unless KEEP_SIZE. Every
// successful call sets mtime and ctime (tmpfs does, even for KEEP_SIZE
// allocation) and clears setuid/setgid for an unprivileged caller.
func (m *Model) Fallocate(ctx context.Context, c journal.Caller, ino journal.Ino, mode journal.FallocMode, off, length int64) error {
	n, err := m.get(ino)
	if err != nil {
		return err
	}
	if off < 0 || length <= 0 {
		return fmt.Errorf("fallocate %d [%d, +%d): %w", ino, off, length, journal.ErrInvalid)
	}
	const known = journal.FallocKeepSize | journal.FallocPunchHole | journal.FallocZeroRange
	punch, zero, keep := mode&journal.FallocPunchHole != 0, mode&journal.FallocZeroRange != 0, mode&journal.FallocKeepSize != 0
	if mode&^known != 0 || punch && zero || punch && !keep {
		return fmt.Errorf("fallocate mode %#x: %w", mode, journal.ErrNotSupported)
	}
	switch n.attr.Type {
	case journal.TypeRegular:
	case journal.TypeDir:
		return fmt.Errorf("fallocate directory %d: %w", ino, journal.ErrIsDir)
	default:
		return fmt.Errorf("fallocate %v %d: %w", n.attr.Type, ino, journal.ErrNotSupported)
	}
	if off > journal.FileSizeMax-length {
		return fmt.Errorf("fallocate %d [%d, +%d): %w", ino, off, length, journal.ErrFileTooBig)
	}
	now := m.clock()
	end := off + length
	size := int64(n.attr.Size)
	if punch || zero {
		n.data.zero(off, min(end, size))
	}
	if !keep && end > size {
		n.attr.Size = uint64(end)
	}
	n.attr.Mtime, n.attr.Ctime = now, now
	killPriv(c, n)
	return nil
}

// CopyFileRange copies up to n bytes from in at inOff to out at outOff, as
// copy_file_range(2): a directory gives ErrIsDir, another non-regular file
// ErrInvalid, a negative offset or n ErrInvalid (Linux: EOVERFLOW for a
// negative offset; it never reaches a filesystem); the count is cut at in's
// end of file (0 bytes: nothing changes) and at FileSizeMax (outOff at or
// beyond it: ErrFileTooBig); overlapping ranges of one file give
// ErrInvalid. out gets mtime and ctime and loses setuid/setgid as on a
// write.
func (m *Model) CopyFileRange(ctx context.Context, c journal.Caller, in journal.Ino, inOff int64, out journal.Ino, outOff int64, n int64) (int64, error) {
	src, err := m.get(in)
	if err != nil {
		return 0, err
	}
	dst, err := m.get(out)
	if err != nil {
		return 0, err
	}
	if src.attr.Type == journal.TypeDir || dst.attr.Type == journal.TypeDir {
		return 0, fmt.Errorf("copy_file_range %d -> %d: %w", in, out, journal.ErrIsDir)
	}
	if src.attr.Type != journal.TypeRegular || dst.attr.Type != journal.TypeRegular {
		return 0, fmt.Errorf("copy_file_range %d -> %d: %w", in, out, journal.ErrInvalid)
	}
	if inOff < 0 || outOff < 0 || n < 0 {
		return 0, fmt.Errorf("copy_file_range %d@%d -> %d@%d (%d bytes): %w", in, inOff, out, outOff, n, journal.ErrInvalid)
	}
	if size := int64(src.attr.Size); inOff >= size {
		n = 0
	} else {
		n = min(n, size-inOff)
	}
	if outOff >= journal.FileSizeMax {
		return 0, fmt.Errorf("copy_file_range to %d at %d: %w", out, outOff, journal.ErrFileTooBig)
	}
	n = min(n, journal.FileSizeMax-outOff)
	if in == out && outOff+n > inOff && outOff < inOff+n {
		return 0, fmt.Errorf("copy_file_range %d: overlapping ranges: %w", in, journal.ErrInvalid)
	}
	if n == 0 {
		return 0, nil
	}
	buf := make([]byte, n)
	src.data.readAt(buf, inOff)
	m.write(c, dst, buf, outOff, m.clock())
	return n, nil
}

// Lseek implements SEEK_DATA and SEEK_HOLE without reporting holes, which
// POSIX allows: for off inside the file SEEK_DATA returns off and
// SEEK_HOLE the size; off < 0 or at or beyond the end gives ErrNoSeekData.
// Other whence values and non-regular files give ErrInvalid.
func (m *Model) Lseek(ctx context.Context, ino journal.Ino, off int64, whence int) (int64, error) {
	n, err := m.get(ino)
	if err != nil {
		return 0, err
	}
	if n.attr.Type != journal.TypeRegular || whence != journal.SeekData && whence != journal.SeekHole {
		return 0, fmt.Errorf("lseek %v %d whence %d: %w", n.attr.Type, ino, whence, journal.ErrInvalid)
	}
	size := int64(n.attr.Size)
	if off < 0 || off >= size {
		return 0, fmt.Errorf("lseek %d to %d beyond %d: %w", ino, off, size, journal.ErrNoSeekData)
	}
	if whence == journal.SeekData {
		return off, nil
	}
	return size, nil
}
