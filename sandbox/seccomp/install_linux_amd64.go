package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install sets PR_SET_NO_NEW_PRIVS and installs the default filter on all
// threads of the calling process (SECCOMP_FILTER_FLAG_TSYNC); the filter is
// inherited by every thread and child created afterwards and survives execve.
// It returns an error wrapping ErrNotSupported if seccomp is missing, and a
// *ThreadSyncError if a thread already has a filter of its own. Install never
// installs a weaker filter instead; on error, the calling thread may be left
// with no_new_privs set, and the caller is expected to give up.
//
// Calling Install again stacks a second copy of the filter, which changes
// nothing but the cost of each system call.
func Install() error {
	if err := Supported(); err != nil {
		return err
	}
	prog, err := program()
	if err != nil {
		return err
	}
	filters := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filters[i] = unix.SockFilter{Code: in.code, Jt: in.jt, Jf: in.jf, K: in.k}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}

	// no_new_privs is per thread: set it on the thread that installs the
	// filter, and TSYNC sets it on the others along with the filter.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filters)
	switch {
	case errno != 0:
		return fmt.Errorf("seccomp: install filter of %d instructions: %w", len(filters), errno)
	case r != 0:
		// With TSYNC, a positive result is the thread that could not be
		// synchronised.
		return &ThreadSyncError{TID: int(r)}
	}
	return nil
}

// Supported reports whether seccomp filters can be installed here (nil if
// yes): the kernel must have seccomp filters, the KILL_PROCESS, ERRNO and
// ALLOW actions, and SECCOMP_FILTER_FLAG_TSYNC. The error wraps
// ErrNotSupported.
func Supported() error {
	// PR_GET_SECCOMP fails with EINVAL on a kernel without seccomp.
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("%w: prctl(PR_GET_SECCOMP): %w", ErrNotSupported, err)
	}
	for _, act := range []uint32{retKillProcess, retErrno, retAllow} {
		a := act
		_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&a)))
		if errno != 0 {
			return fmt.Errorf("%w: seccomp action %#x: %w", ErrNotSupported, act, errno)
		}
	}
	// The kernel validates the flags before it reads the program: with no
	// program, a kernel that knows TSYNC answers EFAULT, one that does not
	// EINVAL.
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, 0)
	if !errors.Is(errno, unix.EFAULT) {
		return fmt.Errorf("%w: seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC): %w", ErrNotSupported, errno)
	}
	return nil
}
