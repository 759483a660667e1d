package landlock

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Rights of the first ABI, and the ABI each later right arrived in.
const (
	accessFSv1 = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM

	abiRefer       = 2 // LANDLOCK_ACCESS_FS_REFER
	abiTruncate    = 3 // LANDLOCK_ACCESS_FS_TRUNCATE
	abiIoctlDev    = 5 // LANDLOCK_ACCESS_FS_IOCTL_DEV
	abiScope       = 6 // LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, LANDLOCK_SCOPE_SIGNAL
	abiTSync       = 8 // LANDLOCK_RESTRICT_SELF_TSYNC
	abiResolveUnix = 9 // LANDLOCK_ACCESS_FS_RESOLVE_UNIX

	// accessRead is what a read rule grants.
	accessRead = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR
	// accessFile is every right that applies to a non-directory; the kernel
	// rejects a rule on a file that grants any other.
	accessFile = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV |
		unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
)

// rulesetAttr is struct landlock_ruleset_attr up to the scoped field (ABI 6).
// Kernels that know a shorter struct accept this one as long as the fields
// they do not know are zero.
type rulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// handledFS is every filesystem right ABI abi knows.
func handledFS(abi int) uint64 {
	h := uint64(accessFSv1)
	if abi >= abiRefer {
		h |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= abiTruncate {
		h |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= abiIoctlDev {
		h |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= abiResolveUnix {
		h |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	}
	return h
}

// scopes is the IPC scoping ABI abi offers; all of it is enabled.
func scopes(abi int) uint64 {
	if abi >= abiScope {
		return unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	return 0
}

// restrictFlags are the landlock_restrict_self flags used at ABI abi.
func restrictFlags(abi int) uintptr {
	if abi >= abiTSync {
		return unix.LANDLOCK_RESTRICT_SELF_TSYNC
	}
	return 0
}

// allowed is what rule r grants on a directory (dir) or a file, within the
// handled rights.
func allowed(r Rule, dir bool, handled uint64) uint64 {
	a := uint64(accessRead)
	if r.Write {
		a = handled
	}
	if !dir {
		a &= accessFile
	}
	return a & handled
}

// Supported returns the Landlock ABI version of the running kernel, or an
// error wrapping ErrNotSupported when Landlock cannot be used.
func Supported() (abi int, err error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		switch errno {
		case unix.ENOSYS:
			return 0, fmt.Errorf("landlock: %w: the kernel is built without it (CONFIG_SECURITY_LANDLOCK)", ErrNotSupported)
		case unix.EOPNOTSUPP:
			return 0, fmt.Errorf("landlock: %w: disabled at boot (add landlock to the lsm= kernel parameter)", ErrNotSupported)
		default:
			return 0, fmt.Errorf("landlock: %w: querying the ABI version: %v", ErrNotSupported, errno)
		}
	}
	if int(v) < 1 {
		return 0, fmt.Errorf("landlock: %w: kernel reports ABI version %d", ErrNotSupported, int(v))
	}
	return int(v), nil
}

// Restrict confines the calling thread, and every process and thread it
// creates from now on, so that it can read and execute beneath the rule
// paths and write only beneath those with Write set; see the package
// documentation for the exact rights, the scopes and the thread rules.
//
// On success the calling goroutine stays locked to its OS thread: start the
// confined command from it. An error before the ruleset is enforced
// (ErrNotSupported, ErrInvalid) leaves the thread as it was.
func Restrict(rules []Rule) error {
	for _, r := range rules {
		if err := r.validate(); err != nil {
			return err
		}
	}
	abi, err := Supported()
	if err != nil {
		return err
	}
	attr := rulesetAttr{handledAccessFS: handledFS(abi), scoped: scopes(abi)}
	rfd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET,
		uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("landlock: create ruleset (ABI %d): %w", abi, errno)
	}
	ruleset := int(rfd)
	defer unix.Close(ruleset)
	for _, r := range rules {
		if err := addRule(ruleset, r, attr.handledAccessFS); err != nil {
			return err
		}
	}

	// From here on the thread changes: keep this goroutine on it for good.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("landlock: set no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), restrictFlags(abi), 0); errno != 0 {
		return fmt.Errorf("landlock: restrict self (ABI %d): %w", abi, errno)
	}
	return nil
}

// addRule adds a path-beneath rule for r to the ruleset.
func addRule(ruleset int, r Rule, handled uint64) error {
	fd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock: open rule path %s: %w: %w", r.Path, err, ErrInvalid)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock: stat rule path %s: %w", r.Path, err)
	}
	dir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	attr := unix.LandlockPathBeneathAttr{Allowed_access: allowed(r, dir, handled), Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("landlock: add rule for %s (write=%t): %w", r.Path, r.Write, errno)
	}
	return nil
}
