package journal

import (
	"context"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// SetAttr changes attributes: chmod, chown, truncate, utimensat. It applies
// Linux's rules that a mount with HANDLE_KILLPRIV_V2 leaves to the server:
// chown of a non-directory clears setuid (and setgid when group-exec is set);
// truncate by an unprivileged caller does the same; chmod by an unprivileged
// caller outside the file's group drops setgid.
func (j *Journal) SetAttr(ctx context.Context, c Caller, ino Ino, in SetAttrIn) (Attr, error) {
	if err := j.lock(); err != nil {
		return Attr{}, err
	}
	defer j.mu.Unlock()
	now := j.cfg.Clock()
	var a Attr
	err := j.update(func(txn *badger.Txn) error {
		n, err := j.getInode(txn, ino)
		if err != nil {
			return err
		}
		if in.Valid&SetSize != 0 {
			if err := j.truncate(txn, c, n, in.Size); err != nil {
				return err
			}
			n.Mtime = now
		}
		if in.Valid&SetMode != 0 {
			n.Mode = in.Mode & ModePerm
			if n.Type != TypeDir && !c.Privileged() && !c.InGroup(n.GID) {
				n.Mode &^= ModeSetgid
			}
		}
		if in.Valid&(SetUID|SetGID) != 0 {
			if in.Valid&SetUID != 0 {
				n.UID = in.UID
			}
			if in.Valid&SetGID != 0 {
				n.GID = in.GID
			}
			if n.Type != TypeDir {
				killPriv(n)
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
	return a, err
}

// killPriv clears setuid, and setgid when group-exec is set (a setgid bit
// without group-exec means mandatory locking and stays).
func killPriv(n *inode) {
	n.Mode &^= ModeSetuid
	if n.Mode&(ModeSetgid|0o010) == ModeSetgid|0o010 {
		n.Mode &^= ModeSetgid
	}
}

// truncate sets a regular file's size.
func (j *Journal) truncate(txn *badger.Txn, c Caller, n *inode, size uint64) error {
	switch {
	case n.Type == TypeDir:
		return fmt.Errorf("truncate directory %d: %w", n.Ino, ErrIsDir)
	case n.Type != TypeRegular:
		return fmt.Errorf("truncate inode %d of type %v: %w", n.Ino, n.Type, ErrInvalid)
	case size > FileSizeMax:
		return fmt.Errorf("truncate to %d bytes: %w", size, ErrFileTooBig)
	}
	if err := j.checkBytesQuota(n.Size, size); err != nil {
		return err
	}
	f, err := j.stage(n, size == 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(int64(size)); err != nil {
		return j.dataErr("truncate", n.Ino, err)
	}
	j.m.Bytes = j.m.Bytes - min(j.m.Bytes, n.Size) + size
	n.Size = size
	if !c.Privileged() {
		killPriv(n)
	}
	return nil
}
