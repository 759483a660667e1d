// Command escapeprobe is the escape battery of `cairn run` (issue 7): a
// static program the integration tests run INSIDE the sandbox, where every
// check must say BLOCKED. Run on the host as root it must say ESCAPED for
// most checks, which is how its own tests prove it can tell the difference.
//
// Usage:
//
//	escapeprobe [flags] CHECK...
//	escapeprobe [flags] all
//
// Output: one line per check, `CHECK STATUS DETAIL`, where DETAIL is a list
// of space-separated name=detail pairs, one per attempt the check made
// (e.g. `mount BLOCKED tmpfs=EPERM bind=EPERM umount:/workspace=EPERM`).
// With -json, one document {"results":[{check,status,detail,attempts:[{name,
// status,detail}]}],"exit":N} instead. A check's status is the worst of its
// attempts':
//
//	BLOCKED  the escape failed (detail: the errno or the reason)
//	ESCAPED  it worked, or the call reached the kernel (see below)
//	ERROR    the probe could not run the check (a file missing, a bad flag)
//	OK       (write-allowed only) the allowed writes worked
//	DENIED   (write-allowed only) an allowed write was refused
//	SKIPPED  (under "all" only) the check's parameter flag was not given
//
// Exit status: 1 if any check ESCAPED; else 2 if any ERROR (or bad usage);
// else 3 if any DENIED; else 0.
//
// Calls the seccomp filter must deny are judged strictly ("filtered"):
// EPERM (the filter's, or the kernel's capability check's) and ENOSYS (no
// such call) are BLOCKED, and ANY other result is ESCAPED, with the errno
// marked "(reached-kernel)": the call got past the filter into the
// syscall's body. Where a successful call could harm the host, the
// arguments are invalid on purpose (bad magic, flags, clock values, fd -1,
// NULL, absent paths) so the kernel rejects them after its permission
// checks: reboot, kexec, modules, swap, clock, move_mount, mount_setattr,
// pivot_root and every int $0x80 and x32 call. Nothing is ever written to
// /proc, /sys or a terminal other than a NUL through TIOCSTI.
//
// Checks (flags in parentheses; "all" skips a check whose flag is missing):
//
//	mount           mount a tmpfs and a bind mount in the scratch directory
//	                (unmounted at once), unmount -umount (default /workspace)
//	mount-api       fsopen+fsconfig+fsmount (detached), fspick /, open_tree
//	                clone of /, move_mount and mount_setattr (invalid flags)
//	pivot-root      pivot_root on a directory that is no mount point
//	chroot          -marker visible directly; then in a child: chroot into a
//	                subdirectory keeping a directory fd outside, fchdir, ".."
//	                x64, chroot("."), and look for -marker (the host-only file)
//	unshare-user    unshare(CLONE_NEWUSER) in a forked child
//	unshare         unshare of mnt, uts, ipc, net, pid, cgroup, time
//	clone-user      clone(CLONE_NEWUSER), clone3(CLONE_NEWUSER|CLONE_NEWTIME)
//	clone           clone with each other namespace flag
//	setns           setns into every /proc/1/ns/* (pid 1: the sandbox init)
//	setns-host      (-host-pid) /proc/PID must not exist, nor its ns files
//	ptrace-parent   PTRACE_SEIZE, then PTRACE_ATTACH, of the parent (detached)
//	ptrace-init     the same on pid 1
//	ptrace-traceme  a child calling PTRACE_TRACEME then exec
//	process-vm      process_vm_readv / process_vm_writev (address 0) on pid 1
//	                and the parent
//	bpf             BPF_PROG_LOAD of a socket filter, BPF_MAP_CREATE
//	perf            perf_event_open of a user-only dummy event on itself
//	io-uring        io_uring_setup, io_uring_enter, io_uring_register
//	userfaultfd     userfaultfd(UFFD_USER_MODE_ONLY), open /dev/userfaultfd
//	keyctl          add_key to its process keyring, keyctl, request_key
//	open-by-handle  name_to_handle_at + open_by_handle_at of / ("shocker")
//	kexec           kexec_load, kexec_file_load (invalid flags)
//	module          init_module (empty), finit_module(-1), delete_module(absent)
//	reboot          reboot with wrong magic numbers
//	swap            swapon / swapoff of an absent path
//	clock           clock_settime and settimeofday with negative values
//	personality     set READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE (then restore)
//	int80           the calls above (and mount family, clone, chroot...)
//	                through the i386 ABI (int $0x80); one child per call, a
//	                child killed by SIGSYS is BLOCKED
//	x32             getpid, mount, unshare with the x32 bit; on a kernel
//	                without the x32 ABI every answer is ENOSYS, reported
//	                BLOCKED with "(kernel-without-x32-ABI)" when
//	                /proc/config.gz says so: the filter is then not proven
//	proc-sys        open for writing (never written) core_pattern, modprobe,
//	                sysrq, randomize_va_space, ip_forward, drop_caches,
//	                binfmt_misc/register
//	sysrq           open /proc/sysrq-trigger for writing (never written)
//	sys-write       open for writing /sys/kernel/uevent_helper, power/state,
//	                transparent_hugepage, cgroup release_agent, cgroup.procs
//	environ         (-secret) the value in its own environment or in any
//	                readable /proc/*/environ (pid 1's, the parent's...)
//	secret-file     (-secret-file) each path must not exist
//	procs           lists visible pids; ESCAPED if -host-pid is visible or
//	                NSpid shows /proc is an outer pid namespace's
//	kill            (-host-pid) kill(PID, 0), pidfd_open(PID): ESRCH
//	setuid          (-setuid) run the setuid-root copy of the probe with
//	                euid-report: ESCAPED if its euid changed or it has caps
//	caps            CapInh/CapPrm/CapEff/CapBnd/CapAmb must all be zero
//	confined        Seccomp must be 2 (filter) and NoNewPrivs 1
//	devfuse         open /dev/fuse; mknod c 10 229 in scratch and open it
//	abstract        (-abstract) connect to the host's abstract unix socket
//	unix            (-unix) connect to the host's pathname unix socket
//	hostns-net      (-host-port) connect to the host's 127.0.0.1:PORT
//	write-deny      (-deny-write) create, mkdir, symlink, mkfifo, link,
//	                rename in/within, chmod (dirs); open for write, truncate
//	                to the same size, chmod, rename (files): all must fail;
//	                anything that works is undone
//	write-allowed   (-allow-write) create+write+read, mkdir, symlink, mkfifo,
//	                rename must all work: OK, else DENIED
//	tiocsti         TIOCSTI of a NUL on each terminal among fds 0-2 and
//	                /dev/tty (none reachable: BLOCKED)
//
// On the host the probe must never damage the machine: sysctls and sysfs
// files are only opened, ptrace is undone at once, setns and personality
// run on a throwaway thread, and checks that touch pid 1, the parent or
// every process's environment refuse (ERROR) in the initial pid
// namespace. Mounts that work are real, though: outside a sandbox, run the
// probe in its own mount and pid namespaces, as its test does.
//
// Helper subcommands the probe runs itself with: euid-report (what the
// setuid check runs), _noop, _int80 NAME, _x32 NAME, _chroot JAIL MARKER.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
