// Package landlock confines a process's filesystem access with the Landlock
// LSM, through the raw landlock_create_ruleset, landlock_add_rule and
// landlock_restrict_self system calls.
//
// # Policy
//
// Restrict builds one ruleset that handles every filesystem right the running
// kernel's Landlock ABI knows, so anything a rule does not grant is denied:
//
//	ABI 1 (Linux 5.13)  execute, read/write file, read dir, remove dir/file,
//	                    make char/dir/reg/sock/fifo/block/sym
//	ABI 2 (5.19)        + refer (rename and link across directories)
//	ABI 3 (6.2)         + truncate
//	ABI 5 (6.10)        + ioctl on character and block devices
//	ABI 9 (7.1)         + resolve unix (connect to pathname unix sockets)
//
// A read rule (Rule.Write false) grants execute, read file and read dir
// beneath its path; a write rule grants every handled right. A rule whose
// path is not a directory gets only the rights that apply to a file (execute,
// read, write, truncate, ioctl on devices, resolve unix): the kernel rejects
// directory rights on a file. Paths are resolved (symlinks followed) when
// Restrict runs.
//
// Consequences callers must plan for:
//   - Opening a device for writing needs a write rule on it: a sandbox that
//     gives "/" read-only needs write rules on /dev/null, /dev/zero,
//     /dev/full, /dev/tty, /dev/ptmx and /dev/pts (or on its own /dev). Device
//     ioctls (ABI 5) follow the same rule: a terminal opened beneath a read
//     rule cannot be configured. Descriptors opened before Restrict (stdio)
//     keep the access they were opened with.
//   - rename and link between two directories need the refer right on both
//     sides and the make right on the destination: a file cannot move from a
//     writable directory into a read-only one (EACCES or EXDEV).
//   - From ABI 9, connecting to a pathname unix socket created outside the
//     sandbox needs a write rule on it. Below ABI 9 the kernel cannot deny
//     it: keep host sockets out of the sandbox's view (e.g. a fresh /run).
//
// Network rights (ABI 4 TCP bind/connect) are deliberately not handled: the
// sandbox's egress policy is enforced by eBPF programs on its cgroup.
//
// From ABI 6 the ruleset also sets the scopes abstract-unix-socket and signal:
// the confined processes cannot connect to abstract unix sockets created
// outside their Landlock domain (host daemons, an X server, another
// sandbox) and cannot send signals to processes outside it. Below ABI 6
// these are not available and Restrict does not fail for it: the sandbox's
// network namespace already separates abstract sockets and its pid namespace
// hides other processes; Supported reports the ABI so callers can require
// more.
//
// # Threads
//
// landlock_restrict_self restricts the calling thread and the processes and
// threads it creates afterwards, not its sibling threads. A Go program has
// several threads and a goroutine moves between them, so Restrict calls
// runtime.LockOSThread and leaves the calling goroutine locked to the
// restricted thread for the rest of its life: start the confined command
// (os/exec, syscall.ForkExec or syscall.Exec) from that same goroutine, after
// Restrict returns. Other goroutines run on unrestricted threads unless the
// kernel has ABI 8 (Linux 7.0), where Restrict passes
// LANDLOCK_RESTRICT_SELF_TSYNC and the kernel restricts every thread of the
// process at once (propagating no_new_privs too).
//
// Landlock requires no_new_privs (or CAP_SYS_ADMIN); Restrict sets
// PR_SET_NO_NEW_PRIVS on the calling thread itself, which its children
// inherit.
//
// # Failure
//
// Restrict fails closed: without Landlock (kernel built without it, or not in
// the lsm= boot list) it returns an error wrapping ErrNotSupported and
// restricts nothing; an invalid rule (relative or missing path) is an error
// wrapping ErrInvalid, reported before anything about the thread changes.
//
// On other operating systems every function returns ErrNotSupported.
package landlock
