//go:build linux

package main

import (
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// checkDevFuse opens /dev/fuse, then makes a FUSE device node (char 10,229)
// in the scratch directory and opens it. A node that is made but cannot be
// opened (a nodev mount) is BLOCKED; the node is removed either way.
func checkDevFuse(o *options) []attempt {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	atts := []attempt{denied("/dev/fuse", err)}
	work, err := o.workDir()
	if err != nil {
		return append(atts, errorAttempt("mknod", err))
	}
	node := filepath.Join(work, "fuse")
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(10, 229))); err != nil {
		return append(atts, attempt{"mknod", Blocked, errText(err)})
	}
	defer unix.Unlink(node)
	fd, err = unix.Open(node, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return append(atts, attempt{"mknod", Blocked, "made-but-open=" + errText(err)})
	}
	unix.Close(fd)
	return append(atts, attempt{"mknod", Escaped, "made-and-opened"})
}

// checkTIOCSTI pushes a NUL byte into the input of each terminal the probe
// can reach (stdin, stdout, stderr when they are terminals, /dev/tty); it
// must fail. NUL rather than a letter so that a terminal it reaches by
// mistake gets nothing visible. No terminal at all is BLOCKED.
func checkTIOCSTI(*options) []attempt {
	var atts []attempt
	for fd := 0; fd <= 2; fd++ {
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			continue
		}
		atts = append(atts, denied("fd"+itoa(fd), tiocsti(fd)))
	}
	fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		atts = append(atts, attempt{"/dev/tty", Blocked, "open:" + errText(err)})
	} else {
		atts = append(atts, denied("/dev/tty", tiocsti(fd)))
		unix.Close(fd)
	}
	return atts
}

func tiocsti(fd int) error {
	var c byte
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
	return errnoOf(e)
}
