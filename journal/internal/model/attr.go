package model

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/journal"
)

// GetAttr returns an inode's attributes.
func (m *Model) GetAttr(ctx context.Context, ino journal.Ino) (journal.Attr, error) {
	n, err := m.get(ino)
	if err != nil {
		return journal.Attr{}, err
	}
	return m.attr(n), nil
}

// SetAttr applies chmod, chown, truncate and utimensat changes as Linux's
// notify_change does once the kernel has checked permissions:
//
//   - errors: a mode change on a symlink ErrNotSupported (fchmodat2 with
//     AT_SYMLINK_NOFOLLOW); a size change on a directory ErrIsDir, on
//     another non-regular file ErrInvalid, beyond FileSizeMax
//     ErrFileTooBig;
//   - SetMode: the new bits, minus setgid when c is unprivileged and not
//     in the (new) group (setattr_prepare);
//   - SetUID/SetGID on a non-directory without SetMode: setuid is cleared
//     even for root; setgid is cleared when group-execute is set, or when
//     c is unprivileged and not in the file's old group;
//   - SetSize: the data is cut or extended with a hole; mtime = now unless
//     a new mtime is given; an unprivileged c clears setuid/setgid as a
//     write does (unless SetMode is given too);
//   - times: SetAtime/SetMtime explicit, *Now the clock; ctime = now
//     unless SetCtime gives it. Every call sets ctime, even one that
//     changes nothing else.
func (m *Model) SetAttr(ctx context.Context, c journal.Caller, ino journal.Ino, in journal.SetAttrIn) (journal.Attr, error) {
	n, err := m.get(ino)
	if err != nil {
		return journal.Attr{}, err
	}
	v := in.Valid
	if v&journal.SetMode != 0 && n.attr.Type == journal.TypeSymlink {
		return journal.Attr{}, fmt.Errorf("chmod symlink %d: %w", ino, journal.ErrNotSupported)
	}
	if v&journal.SetSize != 0 {
		switch {
		case n.attr.Type == journal.TypeDir:
			return journal.Attr{}, fmt.Errorf("truncate directory %d: %w", ino, journal.ErrIsDir)
		case n.attr.Type != journal.TypeRegular:
			return journal.Attr{}, fmt.Errorf("truncate %v %d: %w", n.attr.Type, ino, journal.ErrInvalid)
		case in.Size > journal.FileSizeMax:
			return journal.Attr{}, fmt.Errorf("truncate %d to %d bytes: %w", ino, in.Size, journal.ErrFileTooBig)
		}
	}

	now := m.clock()
	a := &n.attr
	oldGID := a.GID
	if v&journal.SetUID != 0 {
		a.UID = in.UID
	}
	if v&journal.SetGID != 0 {
		a.GID = in.GID
	}
	switch {
	case v&journal.SetMode != 0:
		a.Mode = in.Mode & journal.ModePerm
		if !c.Privileged() && !c.InGroup(a.GID) {
			a.Mode &^= journal.ModeSetgid
		}
	case v&(journal.SetUID|journal.SetGID) != 0 && a.Type != journal.TypeDir:
		a.Mode &^= journal.ModeSetuid
		if a.Mode&0o010 != 0 || !c.Privileged() && !c.InGroup(oldGID) {
			a.Mode &^= journal.ModeSetgid
		}
	}
	if v&journal.SetSize != 0 {
		n.data.truncate(int64(a.Size), int64(in.Size))
		a.Size = in.Size
		a.Mtime = now
		if v&journal.SetMode == 0 {
			killPriv(c, n)
		}
	}
	switch {
	case v&journal.SetAtimeNow != 0:
		a.Atime = now
	case v&journal.SetAtime != 0:
		a.Atime = in.Atime
	}
	switch {
	case v&journal.SetMtimeNow != 0:
		a.Mtime = now
	case v&journal.SetMtime != 0:
		a.Mtime = in.Mtime
	}
	a.Ctime = now
	if v&journal.SetCtime != 0 {
		a.Ctime = in.Ctime
	}
	return m.attr(n), nil
}
