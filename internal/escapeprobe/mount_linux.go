//go:build linux

package main

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// checkMount tries a tmpfs mount, a bind mount (both in the probe's
// scratch directory, unmounted at once when they work) and unmounting
// -umount (default /workspace).
func checkMount(o *options) []attempt {
	work, err := o.workDir()
	if err != nil {
		return []attempt{errorAttempt("scratch", err)}
	}
	var atts []attempt

	if d, err := os.MkdirTemp(work, "tmpfs-"); err != nil {
		atts = append(atts, errorAttempt("tmpfs", err))
	} else {
		err := unix.Mount("escapeprobe", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k")
		atts = append(atts, undoMount(filtered("tmpfs", err), d))
	}

	src, err1 := os.MkdirTemp(work, "bindsrc-")
	dst, err2 := os.MkdirTemp(work, "binddst-")
	if err1 != nil || err2 != nil {
		atts = append(atts, errorAttempt("bind", firstErr(err1, err2)))
	} else {
		err := unix.Mount(src, dst, "", unix.MS_BIND, "")
		atts = append(atts, undoMount(filtered("bind", err), dst))
	}

	atts = append(atts, filtered("umount:"+o.umount, unix.Unmount(o.umount, 0)))
	return atts
}

// undoMount unmounts target when the mount worked, noting a failure.
func undoMount(a attempt, target string) attempt {
	if a.Detail == "ok" {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			a.Detail = "ok(UNMOUNT-FAILED:" + errText(err) + ")"
		}
	}
	return a
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkMountAPI tries the new mount API: fsopen (+ fsconfig, fsmount: a
// detached mount, never attached), fspick on /, open_tree cloning /
// (detached, dropped on close), and move_mount and mount_setattr with
// invalid flags (EINVAL means they reached the kernel).
func checkMountAPI(o *options) []attempt {
	var atts []attempt

	fd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	a := filtered("fsopen", err)
	if err == nil {
		detail := "ok"
		if err := unix.FsconfigCreate(fd); err != nil {
			detail += ",fsconfig=" + errText(err)
		} else if mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0); err != nil {
			detail += ",fsmount=" + errText(err)
		} else {
			detail += ",fsmount=ok"
			unix.Close(mfd)
		}
		unix.Close(fd)
		a.Detail = detail
	}
	atts = append(atts, a)

	fd, err = unix.Fspick(unix.AT_FDCWD, "/", unix.FSPICK_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	atts = append(atts, filtered("fspick", err))

	fd, err = unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	atts = append(atts, filtered("open_tree", err))

	atts = append(atts, filtered("move_mount", unix.MoveMount(-1, "", -1, "", -1)))

	var attr unix.MountAttr
	atts = append(atts, filtered("mount_setattr", unix.MountSetattr(-1, "", ^uint(0), &attr)))
	return atts
}

// checkPivotRoot calls pivot_root on a fresh directory that is no mount
// point: the kernel refuses it (EINVAL or EBUSY), so reaching it is
// harmless, and the filter must answer EPERM first.
func checkPivotRoot(o *options) []attempt {
	work, err := o.workDir()
	if err != nil {
		return []attempt{errorAttempt("scratch", err)}
	}
	d, err := os.MkdirTemp(work, "pivot-")
	if err != nil {
		return []attempt{errorAttempt("pivot_root", err)}
	}
	return []attempt{filtered("pivot_root", unix.PivotRoot(d, d))}
}

// checkChroot looks for the -marker file directly, then runs the classic
// chroot escape in a child process (see helperChroot).
func checkChroot(o *options) []attempt {
	var atts []attempt
	if o.marker != "" {
		if _, err := os.Stat(o.marker); err == nil {
			atts = append(atts, attempt{"marker", Escaped, "visible-without-escape"})
		} else {
			atts = append(atts, attempt{"marker", Blocked, errText(err)})
		}
	}
	work, err := o.workDir()
	if err != nil {
		return append(atts, errorAttempt("scratch", err))
	}
	jail := filepath.Join(work, "jail", "inner")
	if err := os.MkdirAll(jail, 0o755); err != nil {
		return append(atts, errorAttempt("chroot", err))
	}
	marker := o.marker
	if marker == "" {
		marker = "-"
	}
	m, failed := childOutcome("chroot", self("_chroot", jail, marker))
	if failed != nil {
		return append(atts, *failed)
	}
	if e, ok := m["error"]; ok {
		return append(atts, attempt{"chroot", Errored, e})
	}
	atts = append(atts, fromText("chroot", m["chroot"]))
	if esc, ok := m["escape"]; ok {
		if esc == "ok" {
			atts = append(atts, attempt{"escape", Escaped, "ok"})
		} else {
			atts = append(atts, attempt{"escape", Blocked, esc})
		}
	}
	if mk, ok := m["marker"]; ok {
		if mk == "found" {
			atts = append(atts, attempt{"marker-after-escape", Escaped, "found"})
		} else {
			atts = append(atts, attempt{"marker-after-escape", Blocked, mk})
		}
	}
	return atts
}

// fromText classifies a child's "ok" or errno name like filtered.
func fromText(name, v string) attempt {
	switch v {
	case "ok":
		return attempt{name, Escaped, "ok"}
	case "EPERM", "ENOSYS":
		return attempt{name, Blocked, v}
	case "":
		return attempt{name, Errored, "no-answer-from-child"}
	}
	return attempt{name, Escaped, v + "(reached-kernel)"}
}
