package journal

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

// SetAttr changes attributes: chmod, chown, truncate, utimensat. It applies
// Linux's rules that a mount with HANDLE_KILLPRIV_V2 leaves to the server:
// chown of a non-directory clears setuid (and setgid when group-exec is set);
// truncate by an unprivileged caller does the same; chmod by an unprivileged
// caller outside the file's group drops setgid.
func (j *Journal) SetAttr(ctx context.Context, c Caller, ino Ino, in SetAttrIn) (Attr, error) {
	if err := j.lockW(); err != nil {
		return Attr{}, err
	}
	defer j.mu.Unlock()
	if in.Valid&SetSize != 0 {
		if err := j.thaw(ino); err != nil {
			return Attr{}, err
		}
	}
	// What the kernel wrote to a file open for passthrough writing is
	// recorded in this operation's transaction (tar's chown, chmod and
	// utimes after its write), except before a size change, which plans
	// from the recorded size.
	var written *writerChange
	var err error
	if in.Valid&SetSize != 0 {
		err = j.adopt(ino)
	} else {
		written, err = j.pendingWrite(ino)
	}
	if err != nil {
		return Attr{}, err
	}
	now := j.cfg.Clock()
	cur, err := j.inode(ino)
	if err != nil {
		return Attr{}, err
	}
	if in.Valid&SetSize != 0 && in.Size < cur.Size {
		defer j.useReserve()() // shrinking frees space: it works on a full disk
	}
	if in.Valid&SetMode != 0 && cur.Type == TypeSymlink {
		return Attr{}, fmt.Errorf("chmod of symlink %d: %w", ino, ErrNotSupported)
	}
	var plan truncatePlan
	if in.Valid&SetSize != 0 {
		var err error
		if plan, err = j.prepareTruncate(ino, in.Size); err != nil {
			return Attr{}, err
		}
	}
	var a Attr
	err = j.update(func(txn *metalog.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		if written != nil {
			written.apply(j, n)
		}
		v := in.Valid
		oldGID := n.GID
		if v&SetUID != 0 {
			n.UID = in.UID
		}
		if v&SetGID != 0 {
			n.GID = in.GID
		}
		switch {
		case v&SetMode != 0:
			// chmod by someone outside the (new) group drops setgid.
			n.Mode = in.Mode & ModePerm
			if !c.Privileged() && !c.InGroup(n.GID) {
				n.Mode &^= ModeSetgid
			}
		case v&(SetUID|SetGID) != 0 && n.Type != TypeDir:
			// chown of a non-directory clears setuid, even by root, and
			// setgid when group-exec is set or (unprivileged) the caller
			// was not in the old group.
			n.Mode &^= ModeSetuid
			if n.Mode&0o010 != 0 || !c.Privileged() && !c.InGroup(oldGID) {
				n.Mode &^= ModeSetgid
			}
		}
		if v&SetSize != 0 {
			j.m.Bytes = j.m.Bytes - min(j.m.Bytes, n.Size) + in.Size
			n.Size = in.Size
			n.Mtime = now
			if plan.emptyStage {
				n.Staged = true
			}
			if v&SetMode == 0 {
				killPriv(c, n)
			}
		}
		switch {
		case in.Valid&SetAtimeNow != 0:
			n.Atime = now
		case in.Valid&SetAtime != 0:
			n.Atime = in.Atime
		}
		switch {
		case in.Valid&SetMtimeNow != 0:
			n.Mtime = now
		case in.Valid&SetMtime != 0:
			n.Mtime = in.Mtime
		}
		n.Ctime = now
		if in.Valid&SetCtime != 0 {
			n.Ctime = in.Ctime
		}
		if err := j.putInode(txn, n); err != nil {
			return err
		}
		a = n.Attr
		return j.markDirty(txn, n)
	})
	if err != nil {
		delete(j.trimmed, ino)
		return a, err
	}
	if written != nil {
		written.committed(j)
	}
	// The new size is committed: now the staging file may lose bytes.
	switch {
	case plan.cut != nil:
		if plan.cut.Truncate(int64(in.Size)) != nil {
			delete(j.trimmed, ino) // bytes past Size stay; trim cuts them before growth
		}
	case plan.emptyStage:
		_, _ = j.stagingFile(ino, true) // if this fails, openStaged creates it later
	}
	// A file open for passthrough writing takes its size and mtime from
	// its staging file when the kernel wrote it (syncWriter). The truncate
	// above moved the staging file's mtime to a moment later than the
	// mtime just returned (which the kernel caches): set it to that mtime,
	// and record it as known, so the snapshot and a later stat agree with
	// what the kernel reported now.
	if ws, ok := j.writers[ino]; ok && in.Valid&SetSize != 0 {
		if os.Chtimes(j.stagingPath(ino), time.Time{}, time.Unix(0, a.Mtime)) == nil {
			ws.size, ws.mtime = int64(in.Size), a.Mtime
		}
	}
	return a, nil
}

// truncatePlan is what SetAttr does to the staging file around the
// metadata transaction of a size change.
type truncatePlan struct {
	cut        File // shrink: cut this staging file after the commit
	emptyStage bool // truncate of a clean file to zero: stage an empty file after the commit
}

// prepareTruncate checks a size change and does what must precede its
// commit: a file that grows is staged, trimmed and extended with zeros; a
// file that shrinks is staged (so its bytes can be cut after the commit).
func (j *Journal) prepareTruncate(ino Ino, size uint64) (truncatePlan, error) {
	n, err := j.inode(ino)
	if err != nil {
		return truncatePlan{}, err
	}
	switch {
	case n.Type == TypeDir:
		return truncatePlan{}, fmt.Errorf("truncate directory %d: %w", ino, ErrIsDir)
	case n.Type != TypeRegular:
		return truncatePlan{}, fmt.Errorf("truncate inode %d of type %v: %w", ino, n.Type, ErrInvalid)
	case size > FileSizeMax:
		return truncatePlan{}, fmt.Errorf("truncate to %d bytes: %w", size, ErrFileTooBig)
	}
	if err := j.checkBytesQuota(n.Size, size); err != nil {
		return truncatePlan{}, err
	}
	switch {
	case size > n.Size:
		f, err := j.prepareData(n)
		if err != nil {
			return truncatePlan{}, err
		}
		if err := j.trim(f, n); err != nil {
			return truncatePlan{}, err
		}
		if err := f.Truncate(int64(size)); err != nil {
			delete(j.trimmed, ino)
			return truncatePlan{}, j.dataErr("truncate", ino, err)
		}
	case size < n.Size && size == 0 && !n.Staged:
		return truncatePlan{emptyStage: true}, nil // no copy-up of bytes about to go
	case size < n.Size:
		f, err := j.prepareData(n)
		if err != nil {
			return truncatePlan{}, err
		}
		return truncatePlan{cut: f}, nil
	}
	return truncatePlan{}, nil
}

// killPriv applies what Linux does to a regular file changed by an
// unprivileged caller (write, truncate, fallocate): setuid goes, and setgid
// too when group-exec is set or the caller is not in the file's group.
func killPriv(c Caller, n *inode) {
	if n.Type != TypeRegular || c.Privileged() {
		return
	}
	n.Mode &^= ModeSetuid
	if n.Mode&0o010 != 0 || !c.InGroup(n.GID) {
		n.Mode &^= ModeSetgid
	}
}
