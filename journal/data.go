package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

// File data. A clean regular file's bytes are its committed content (inline
// in its record, or chunks in the store). The first change copies them into
// a staging file (copy-up), which from then on holds the file's bytes. The
// record's Size is authoritative; the staging file may be longer.
//
// Order of operations, so that a kill at any point keeps the durability
// contract (the crash tests check it):
//   - Before bytes within Size change, the inode is Staged and dirty in a
//     committed transaction (prepareData). A write killed after its pwrite
//     then shows its bytes in reads and in the next snapshot alike, and
//     acknowledged bytes are never overwritten by anything but a write.
//   - A file shrinks in the metadata first; the staging file is cut after.
//   - Before a file grows, its staging file is cut to Size (trim), so bytes
//     an interrupted write left past the end never reappear as content.

// maxOpenStaging bounds the staging files kept open.
const maxOpenStaging = 256

func (j *Journal) stagingPath(ino Ino) string {
	return filepath.Join(j.staging, strconv.FormatUint(uint64(ino), 10))
}

// stagingFile returns the open staging file of ino, opening it if needed.
func (j *Journal) stagingFile(ino Ino, create bool) (File, error) {
	if f, ok := j.files[ino]; ok {
		return f, nil
	}
	var f File
	var err error
	if create {
		f, err = j.createStaging(ino)
	} else {
		f, err = j.cfg.FS.OpenFile(j.stagingPath(ino), os.O_RDWR, 0o600)
	}
	if err != nil {
		return nil, err
	}
	if len(j.files) >= maxOpenStaging {
		for other, of := range j.files {
			of.Close()
			delete(j.files, other)
			break
		}
	}
	j.files[ino] = f
	return f, nil
}

// createStaging creates an empty staging file for ino (not kept open in
// j.files). Usually there is none yet: O_EXCL then costs the filesystem
// nothing more, where O_TRUNC on a new file costs ext4 a truncate (about
// 0.6 ms of CPU, most of a create, measured). One a crash left (of an
// inode whose record was not committed, or was never staged) is cut.
func (j *Journal) createStaging(ino Ino) (File, error) {
	path := j.stagingPath(ino)
	f, err := j.cfg.FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		f, err = j.cfg.FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	}
	return f, err
}

// stage makes sure n has a staging file holding its current bytes (copy-up)
// and returns it. With empty, the copy is skipped: the caller is about to
// truncate to zero. Sets n.Staged; the caller saves n.
func (j *Journal) stage(n *inode, empty bool) (File, error) {
	if n.Staged {
		return j.openStaged(n)
	}
	f, err := j.stagingFile(n.Ino, true)
	if err != nil {
		return nil, j.dataErr("create staging file", n.Ino, err)
	}
	if !empty && n.Size > 0 {
		// The copy-up's bytes are an ordinary write, whoever asks. A
		// sparse file's size says little of its data: past copyUpCheck,
		// the copy's own ENOSPC (below) is the check.
		if err := j.space.check(min(n.Size, copyUpCheck), false); err != nil {
			f.Close()
			delete(j.files, n.Ino)
			j.cfg.FS.Remove(j.stagingPath(n.Ino))
			return nil, fmt.Errorf("copy-up of inode %d: %w", n.Ino, err)
		}
		if err := j.copyUp(n, f); err != nil {
			f.Close()
			delete(j.files, n.Ino)
			j.cfg.FS.Remove(j.stagingPath(n.Ino))
			return nil, err
		}
	}
	n.Staged = true
	return f, nil
}

// prepareData makes n Staged and dirty in a committed transaction (unless
// it is already), copying its content up, and returns its staging file. n
// is updated.
func (j *Journal) prepareData(n *inode) (File, error) {
	return j.prepareDataWith(n, nil)
}

// prepareDataWith is prepareData with more to write in its transaction
// (always written, even when n is ready already).
func (j *Journal) prepareDataWith(n *inode, extra func(txn *metalog.Txn) error) (File, error) {
	if n.Staged && j.isDirty(n.Ino) {
		if extra != nil {
			if err := j.update(extra); err != nil {
				return nil, err
			}
		}
		return j.openStaged(n)
	}
	copied := !n.Staged
	f, err := j.stage(n, false)
	if err != nil {
		return nil, err
	}
	if err := j.saveDirty(n, extra); err != nil {
		return nil, err
	}
	if copied {
		// A copy-up leaves exactly Size bytes. A staging file kept from
		// before (the file was committed clean since) may hold more: a
		// write killed past the end, or a shrink killed before its cut.
		j.trimmed[n.Ino] = struct{}{}
	}
	return f, nil
}

// saveDirty saves n and marks it dirty in one transaction, with extra
// (if any) in it too.
func (j *Journal) saveDirty(n *inode, extra func(txn *metalog.Txn) error) error {
	return j.update(func(txn *metalog.Txn) error {
		if err := j.putInode(txn, n); err != nil {
			return err
		}
		if extra != nil {
			if err := extra(txn); err != nil {
				return err
			}
		}
		return j.markDirty(txn, n)
	})
}

// openStaged opens the staging file of a Staged inode. An empty file may
// have been truncated to zero in its record just before a crash, before its
// staging file was created: it is created now.
func (j *Journal) openStaged(n *inode) (File, error) {
	f, err := j.stagingFile(n.Ino, false)
	if errors.Is(err, os.ErrNotExist) && n.Size == 0 {
		f, err = j.stagingFile(n.Ino, true)
	}
	if err != nil {
		return nil, j.dataErr("open staging file", n.Ino, err)
	}
	return f, nil
}

// trim cuts n's staging file to n.Size before the file grows, once per
// inode and process (and again after a failed data operation).
func (j *Journal) trim(f File, n *inode) error {
	if _, ok := j.trimmed[n.Ino]; ok {
		return nil
	}
	if err := f.Truncate(int64(n.Size)); err != nil {
		return j.dataErr("trim staging file", n.Ino, err)
	}
	j.trimmed[n.Ino] = struct{}{}
	return nil
}

// copyUp writes n's committed content into the staging file f.
func (j *Journal) copyUp(n *inode, f File) error {
	if len(n.Inline) > 0 {
		if _, err := f.WriteAt(n.Inline, 0); err != nil {
			return j.dataErr("copy-up", n.Ino, err)
		}
	} else {
		r, err := j.store.OpenFile(context.Background(), n.content())
		if err != nil {
			return fmt.Errorf("%w: copy-up of inode %d: %v", ErrIO, n.Ino, err)
		}
		// The staging file is new: its holes stay holes.
		if _, err := r.WriteDataTo(f); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return j.dataErr("copy-up", n.Ino, err)
			}
			return fmt.Errorf("%w: copy-up of inode %d: %v", ErrIO, n.Ino, err)
		}
	}
	if err := f.Truncate(int64(n.Size)); err != nil {
		return j.dataErr("copy-up", n.Ino, err)
	}
	return nil
}

// dataErr maps a staging-file error: a full disk is ErrNoSpace, anything
// else ErrIO, both naming the inode.
func (j *Journal) dataErr(op string, ino Ino, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%s of inode %d: the journal's disk is full (%v): %w", op, ino, err, ErrNoSpace)
	}
	if errors.Is(err, syscall.EFBIG) {
		return fmt.Errorf("%s of inode %d: %v: %w", op, ino, err, ErrFileTooBig)
	}
	return fmt.Errorf("%s of inode %d: %v: %w", op, ino, err, ErrIO)
}

// Read reads up to len(p) bytes at off. At or past the end it returns 0.
func (j *Journal) Read(ctx context.Context, ino Ino, p []byte, off int64) (int, error) {
	if err := j.lock(); err != nil {
		return 0, err
	}
	defer j.mu.Unlock()
	if err := j.adopt(ino); err != nil {
		return 0, err
	}
	n, err := j.regularAt(ino, "read", off)
	if err != nil {
		return 0, err
	}
	return j.readLocked(ctx, n, p, off)
}

// regularAt returns regular file ino for an operation at off, checked in
// Linux's order: the inode, the offset, the file type.
func (j *Journal) regularAt(ino Ino, op string, off int64) (*inode, error) {
	n, err := j.inode(ino)
	if err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("%s at %d: %w", op, off, ErrInvalid)
	}
	if err := checkRegular(n, op); err != nil {
		return nil, err
	}
	return n, nil
}

// checkRegular fails with ErrIsDir for a directory and ErrInvalid for any
// other non-regular file, as Linux does for file I/O.
func checkRegular(n *inode, op string) error {
	switch n.Type {
	case TypeRegular:
		return nil
	case TypeDir:
		return fmt.Errorf("%s of directory %d: %w", op, n.Ino, ErrIsDir)
	}
	return fmt.Errorf("%s of inode %d of type %v: %w", op, n.Ino, n.Type, ErrInvalid)
}

func (j *Journal) inode(ino Ino) (*inode, error) {
	var n *inode
	err := j.db.View(func(txn *metalog.Txn) error {
		var err error
		n, err = j.getInode(txn, ino)
		return err
	})
	return n, err
}

func (j *Journal) readLocked(ctx context.Context, n *inode, p []byte, off int64) (int, error) {
	if uint64(off) >= n.Size {
		return 0, nil
	}
	p = p[:min(uint64(len(p)), n.Size-uint64(off))]
	switch {
	case n.Staged:
		f, err := j.openStaged(n)
		if err != nil {
			return 0, err
		}
		got, err := f.ReadAt(p, off)
		if err == io.EOF { // staging files are kept Size long; be safe anyway
			clear(p[got:])
			got, err = len(p), nil
		}
		if err != nil {
			return got, j.dataErr("read", n.Ino, err)
		}
		return got, nil
	case n.Inline != nil || n.Size == 0:
		return copy(p, n.Inline[min(uint64(len(n.Inline)), uint64(off)):]), nil
	}
	r, err := j.store.OpenFile(ctx, n.content())
	if err != nil {
		return 0, fmt.Errorf("%w: read inode %d from the store: %v", ErrIO, n.Ino, err)
	}
	got, err := r.ReadAt(p, off)
	if err == io.EOF && got == len(p) {
		err = nil
	}
	if err != nil {
		return got, fmt.Errorf("%w: read inode %d from the store: %v", ErrIO, n.Ino, err)
	}
	return got, nil
}

// Write writes p at off, extending the file as needed. A write that would
// cross FileSizeMax is cut short there; one starting at or past it fails
// with ErrFileTooBig. A write of nothing changes nothing.
func (j *Journal) Write(ctx context.Context, c Caller, ino Ino, p []byte, off int64) (int, error) {
	if err := j.lockW(); err != nil {
		return 0, err
	}
	defer j.mu.Unlock()
	if err := j.thaw(ino); err != nil {
		return 0, err
	}
	if err := j.adopt(ino); err != nil {
		return 0, err
	}
	n, err := j.regularAt(ino, "write", off)
	if err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= FileSizeMax {
		return 0, fmt.Errorf("write at byte %d: %w", off, ErrFileTooBig)
	}
	p = p[:min(int64(len(p)), FileSizeMax-off)]
	return j.writeLocked(c, n, p, off, j.cfg.Clock())
}

// writeLocked writes p at off into the regular file n (checked by the
// caller), with modification time now.
func (j *Journal) writeLocked(c Caller, n *inode, p []byte, off int64, now int64) (int, error) {
	ino := n.Ino
	end := uint64(off) + uint64(len(p))
	newSize := max(n.Size, end)
	if err := j.checkBytesQuota(n.Size, newSize); err != nil {
		return 0, err
	}
	f, err := j.prepareData(n)
	if err != nil {
		return 0, err
	}
	if newSize > n.Size {
		if err := j.trim(f, n); err != nil {
			return 0, err
		}
	}
	if err := j.space.check(uint64(len(p)), false); err != nil {
		return 0, fmt.Errorf("write of inode %d: %w", ino, err)
	}
	written, err := f.WriteAt(p, off)
	if err != nil {
		delete(j.trimmed, ino)
		return 0, j.dataErr("write", ino, err)
	}
	err = j.update(func(txn *metalog.Txn) error {
		j.m.Bytes = j.m.Bytes - min(j.m.Bytes, n.Size) + newSize
		n.Size = newSize
		n.Mtime, n.Ctime = now, now
		killPriv(c, n)
		return j.putInode(txn, n)
	})
	if err != nil {
		delete(j.trimmed, ino)
		return 0, err
	}
	return written, nil
}

// Fallocate implements fallocate(2): mode 0 extends the file to off+length
// if it is shorter; KEEP_SIZE changes no size; PUNCH_HOLE (with KEEP_SIZE)
// and ZERO_RANGE zero the range, ZERO_RANGE extending the file unless
// KEEP_SIZE. Every successful call sets mtime and ctime (and clears setuid,
// as a write does), as Linux does. Space is not reserved: staging files are
// sparse.
func (j *Journal) Fallocate(ctx context.Context, c Caller, ino Ino, mode FallocMode, off, length int64) error {
	if err := j.lockW(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	if err := j.thaw(ino); err != nil {
		return err
	}
	if err := j.adopt(ino); err != nil {
		return err
	}
	n, err := j.inode(ino)
	if err != nil {
		return err
	}
	if off < 0 || length <= 0 {
		return fmt.Errorf("fallocate(%d, %d): %w", off, length, ErrInvalid)
	}
	const known = FallocKeepSize | FallocPunchHole | FallocZeroRange
	punch, zero, keep := mode&FallocPunchHole != 0, mode&FallocZeroRange != 0, mode&FallocKeepSize != 0
	if mode&^known != 0 || punch && zero || punch && !keep {
		return fmt.Errorf("fallocate mode %#x: %w", mode, ErrNotSupported)
	}
	switch n.Type {
	case TypeRegular:
	case TypeDir:
		return fmt.Errorf("fallocate of directory %d: %w", ino, ErrIsDir)
	default:
		return fmt.Errorf("fallocate of inode %d of type %v: %w", ino, n.Type, ErrNotSupported)
	}
	if off > FileSizeMax-length {
		return fmt.Errorf("fallocate to byte %d: %w", off+length, ErrFileTooBig)
	}
	end := uint64(off) + uint64(length)
	newSize := n.Size
	if !keep {
		newSize = max(n.Size, end)
	}
	if err := j.checkBytesQuota(n.Size, newSize); err != nil {
		return err
	}
	now := j.cfg.Clock()
	if (punch || zero) && uint64(off) < n.Size || newSize > n.Size {
		f, err := j.prepareData(n)
		if err != nil {
			return err
		}
		if (punch || zero) && uint64(off) < n.Size {
			zlen := min(end, n.Size) - uint64(off)
			if err := f.PunchHole(off, int64(zlen)); err != nil {
				// The staging filesystem cannot punch holes: write zeros.
				if err := writeZeros(f, off, int64(zlen)); err != nil {
					return j.dataErr("fallocate", ino, err)
				}
			}
		}
		if newSize > n.Size {
			if err := j.trim(f, n); err != nil {
				return err
			}
			if err := f.Truncate(int64(newSize)); err != nil {
				delete(j.trimmed, ino)
				return j.dataErr("fallocate", ino, err)
			}
		}
	}
	err = j.update(func(txn *metalog.Txn) error {
		j.m.Bytes = j.m.Bytes - min(j.m.Bytes, n.Size) + newSize
		n.Size = newSize
		n.Mtime, n.Ctime = now, now
		killPriv(c, n)
		if err := j.putInode(txn, n); err != nil {
			return err
		}
		return j.markDirty(txn, n)
	})
	if err != nil {
		delete(j.trimmed, ino)
	}
	return err
}

func writeZeros(f File, off, n int64) error {
	zeros := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// CopyFileRange copies up to n bytes from in at inOff to out at outOff and
// returns how many it copied: the count is first cut at the end of in (and
// at FileSizeMax in out), then overlapping ranges of one file are refused,
// as Linux does. Copying nothing changes nothing.
func (j *Journal) CopyFileRange(ctx context.Context, c Caller, in Ino, inOff int64, out Ino, outOff int64, n int64) (int64, error) {
	if err := j.lockW(); err != nil {
		return 0, err
	}
	defer j.mu.Unlock()
	if err := j.thaw(out); err != nil {
		return 0, err
	}
	if err := j.adopt(in); err != nil {
		return 0, err
	}
	if err := j.adopt(out); err != nil {
		return 0, err
	}
	src, err := j.inode(in)
	if err != nil {
		return 0, err
	}
	dst, err := j.inode(out)
	if err != nil {
		return 0, err
	}
	if src.Type == TypeDir || dst.Type == TypeDir {
		return 0, fmt.Errorf("copy_file_range %d -> %d: %w", in, out, ErrIsDir)
	}
	if src.Type != TypeRegular || dst.Type != TypeRegular {
		return 0, fmt.Errorf("copy_file_range %d -> %d: %w", in, out, ErrInvalid)
	}
	if inOff < 0 || outOff < 0 || n < 0 {
		return 0, fmt.Errorf("copy_file_range: %w", ErrInvalid)
	}
	if size := int64(src.Size); inOff >= size {
		n = 0
	} else {
		n = min(n, size-inOff)
	}
	if outOff >= FileSizeMax {
		return 0, fmt.Errorf("copy_file_range to byte %d: %w", outOff, ErrFileTooBig)
	}
	n = min(n, FileSizeMax-outOff)
	if in == out && outOff+n > inOff && outOff < inOff+n {
		return 0, fmt.Errorf("copy_file_range within one file, overlapping: %w", ErrInvalid)
	}
	if n == 0 {
		return 0, nil
	}
	now := j.cfg.Clock()
	var copied int64
	buf := make([]byte, min(n, 1<<20))
	for copied < n {
		k, err := j.readLocked(ctx, src, buf[:min(int64(len(buf)), n-copied)], inOff+copied)
		if err != nil {
			return copied, err
		}
		if k == 0 {
			break
		}
		if dst, err = j.inode(out); err != nil {
			return copied, err
		}
		if _, err := j.writeLocked(c, dst, buf[:k], outOff+copied, now); err != nil {
			return copied, err
		}
		copied += int64(k)
		if in == out { // the file changed (outside the source range); reload it
			if src, err = j.inode(in); err != nil {
				return copied, err
			}
		}
	}
	return copied, nil
}

// Lseek implements SEEK_DATA and SEEK_HOLE. The journal reports no holes
// (POSIX allows it): data runs from 0 to the end of the file.
func (j *Journal) Lseek(ctx context.Context, ino Ino, off int64, whence int) (int64, error) {
	if err := j.lock(); err != nil {
		return 0, err
	}
	defer j.mu.Unlock()
	if err := j.adopt(ino); err != nil {
		return 0, err
	}
	n, err := j.inode(ino)
	if err != nil {
		return 0, err
	}
	if n.Type != TypeRegular || whence != SeekData && whence != SeekHole {
		return 0, fmt.Errorf("lseek on inode %d of type %v, whence %d: %w", ino, n.Type, whence, ErrInvalid)
	}
	if off < 0 || uint64(off) >= n.Size {
		return 0, fmt.Errorf("lseek to %d of %d bytes: %w", off, n.Size, ErrNoSeekData)
	}
	pos, ok, err := j.seekLocked(ctx, n, off, whence == SeekHole)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("lseek: no data at or after %d of %d bytes: %w", off, n.Size, ErrNoSeekData)
	}
	return pos, nil
}

// seekLocked finds the first data (or hole) offset at or after off < Size:
// in the staging file of a staged file, in the chunk list of a stored one.
// The end of the file is a hole.
func (j *Journal) seekLocked(ctx context.Context, n *inode, off int64, hole bool) (int64, bool, error) {
	switch {
	case n.Staged:
		f, err := j.openStaged(n)
		if err != nil {
			return 0, false, err
		}
		whence := SeekData
		if hole {
			whence = SeekHole
		}
		pos, err := f.Seek(off, whence)
		switch {
		case errors.Is(err, syscall.ENXIO): // past the staging file's data: a hole to the end
			if hole {
				return off, true, nil
			}
			return 0, false, nil
		case err != nil:
			return 0, false, j.dataErr("seek", n.Ino, err)
		case pos >= int64(n.Size): // the stale tail past Size is not the file's
			if hole {
				return int64(n.Size), true, nil
			}
			return 0, false, nil
		}
		return pos, true, nil
	case n.Inline != nil:
		if hole {
			return int64(n.Size), true, nil
		}
		return off, true, nil
	}
	r, err := j.store.OpenFile(ctx, n.content())
	if err != nil {
		return 0, false, fmt.Errorf("%w: seek in inode %d: %v", ErrIO, n.Ino, err)
	}
	pos, ok := r.Seek(uint64(off), hole)
	return int64(pos), ok, nil
}

// Fsync makes ino's data and the journal's metadata durable.
func (j *Journal) Fsync(ctx context.Context, ino Ino, dataOnly bool) error {
	if err := j.lock(); err != nil {
		return err
	}
	defer j.mu.Unlock()
	defer j.useReserve()() // what a passthrough writer wrote is recorded on a full disk too
	if err := j.adopt(ino); err != nil {
		return err
	}
	n, err := j.inode(ino)
	if err != nil {
		return err
	}
	if n.Staged {
		f, err := j.openStaged(n)
		if err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return j.dataErr("fsync", ino, err)
		}
	}
	if err := j.db.Sync(); err != nil {
		return fmt.Errorf("%w: fsync journal metadata: %v", ErrIO, err)
	}
	return nil
}

// forget closes and removes the staging files of deleted inodes, after the
// transaction that deleted them committed.
func (j *Journal) forget(gone []*inode) {
	for _, n := range gone {
		if f, ok := j.files[n.Ino]; ok {
			f.Close()
			delete(j.files, n.Ino)
		}
		if n.Staged {
			j.removeStaging(n.Ino)
		}
		delete(j.loadedDirs, n.Ino)
		delete(j.trimmed, n.Ino)
	}
}
