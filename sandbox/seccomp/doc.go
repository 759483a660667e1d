// Package seccomp confines a process with a seccomp-BPF allowlist in the
// spirit of Docker's default profile (moby/profiles seccomp/default.json, for
// a container without capabilities), written as our own classic BPF program:
// no libseccomp, no cgo.
//
// Install sets no_new_privs and installs the filter on every thread of the
// calling process (SECCOMP_FILTER_FLAG_TSYNC); it fails, and never installs
// less, when that is not possible. Supported tells in advance.
//
// # ABIs
//
// The filter first reads seccomp_data.arch:
//
//   - AUDIT_ARCH_X86_64: the x86_64 table. A number with __X32_SYSCALL_BIT
//     (or any number at or above it) is an x32 call: EPERM, the whole x32
//     ABI is denied.
//   - AUDIT_ARCH_I386: the same policy, by name, with i386 numbers. This is
//     how the kernel reports INT $0x80 even from a 64-bit process, so a
//     filter that only checked x86_64 numbers would let every i386 call
//     through.
//   - anything else: SECCOMP_RET_KILL_PROCESS.
//
// Then a binary search on the number reaches the call's action: at most 16
// instructions of a 460-instruction program. Calls allowed outright are
// decided on arch and number alone, so the kernel's seccomp action cache
// (Linux 5.11+) can let them through without running the filter; only
// clone, ioctl, personality, socket and socketcall look at arguments.
// BenchmarkSyscall measures the cost (here about 10 ns on a plain allowed
// call, 25 ns on an ioctl).
//
// # What is allowed
//
// Everything a normal program, a shell, an interpreter or a compiler needs:
// files, directories, xattrs, sockets, pipes, polling, signals, threads,
// futexes, memory management, timers, process creation and execve, System V
// and POSIX IPC, AIO (io_setup...), inotify, memfd, landlock (it can only
// restrict further), seccomp (stacking only restricts), prctl, rseq. The
// table in table.go is the reference, one row per system call.
//
// # What is denied, and why
//
// Unless said otherwise, denied calls fail with EPERM (Docker's default
// action), which programs treat as "not permitted here".
//
//   - The mount family: mount, umount, umount2, mount_setattr, open_tree,
//     open_tree_attr, move_mount, fsopen, fsconfig, fsmount, fspick,
//     pivot_root, chroot.
//   - Namespaces: unshare and setns always; clone whenever its flags contain a
//     CLONE_NEW* flag (NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET,
//     NEWCGROUP, NEWTIME); listns.
//   - clone3 fails with ENOSYS instead: its flags are in memory, out of
//     seccomp's reach, and ENOSYS makes glibc (pthread_create, posix_spawn)
//     fall back to clone, whose flags are checked. Go's runtime and os/exec
//     use clone, except with SysProcAttr.UseCgroupFD, which needs clone3 and
//     therefore fails under the filter.
//   - Kernel attack surface: bpf, perf_event_open, io_uring_setup/enter/
//     register (io_uring operations bypass seccomp), userfaultfd, keyctl,
//     add_key, request_key (keyrings are not namespaced), lookup_dcookie,
//     fanotify_init, open_by_handle_at and name_to_handle_at.
//   - Other processes: ptrace, process_vm_readv/writev, process_madvise,
//     pidfd_getfd, kcmp, migrate_pages, move_pages.
//   - The machine: reboot, kexec_load, kexec_file_load, init_module,
//     finit_module, delete_module, swapon, swapoff, acct, quotactl,
//     quotactl_fd, syslog, vhangup, iopl, ioperm, vm86, sethostname,
//     setdomainname, nfsservctl.
//   - Clocks: settimeofday, stime, clock_settime(64), and also adjtimex and
//     clock_adjtime(64), which Docker allows because they are read-only
//     without CAP_SYS_TIME.
//   - NUMA policy: mbind, set_mempolicy, get_mempolicy,
//     set_mempolicy_home_node (Docker allows them only with CAP_SYS_NICE).
//   - lsm_set_self_attr (lsm_get_self_attr and lsm_list_modules are allowed).
//   - Obsolete and never implemented calls (_sysctl, uselib, ustat, sysfs,
//     old i386 calls such as signal, sigaction, readdir, olduname...).
//
// Checked by argument (the low 32 bits, see below):
//
//   - clone: denied (EPERM) with any CLONE_NEW* flag, allowed otherwise.
//   - ioctl: TIOCSTI (pushing input into a terminal) and TIOCLINUX (which
//     includes pasting a VT selection) are denied; every other request is
//     allowed, as in Docker's profile.
//   - personality: only Docker's values, PER_LINUX (0), PER_LINUX32 (8),
//     UNAME26 (0x20000), UNAME26|PER_LINUX32 (0x20008) and the query
//     0xffffffff; anything else, READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE for
//     instance, is EPERM.
//   - socket: every address family from AF_UNIX to AF_MCTP, including
//     AF_NETLINK (as Docker), except AF_ALG (the kernel crypto API) and
//     AF_VSOCK (host/guest sockets: network namespaces do not isolate them by
//     default, and in a virtual machine they reach the hypervisor's host), as
//     in Docker's current profile. These, AF_UNSPEC and families newer than AF_MCTP fail
//     with EAFNOSUPPORT, the error of a kernel without the family, so that
//     programs that probe a family fall back quietly.
//   - socketcall (i386 only): allowed, except its SYS_SOCKET call, which
//     fails with EPERM: the family is in memory, so allowing it would reopen
//     AF_VSOCK and AF_ALG to i386 code. 32-bit programs create sockets with
//     the i386 socket call (number 359), which is checked like x86_64's.
//     This is stricter than Docker, which allows socketcall whole; the cost
//     is that 32-bit glibc programs, which use socketcall, cannot create
//     sockets.
//
// Numbers that no row of the table names, on either ABI (gaps in the
// numbering, and calls added to the kernel after the table), fail with
// ENOSYS rather than EPERM: it is what a kernel without the call answers, so
// a future libc that tries a new call first still falls back to the old one
// (runc does the same for calls its libseccomp does not know). They are
// denied either way.
//
// # Arguments are compared on their low 32 bits
//
// seccomp_data.args are 64-bit, but every argument the filter checks is a
// 32-bit value in the kernel (ioctl's cmd, personality's persona: unsigned
// int; socket's family, socketcall's call: int; clone: the kernel keeps
// lower_32_bits(flags)). The filter therefore loads and compares only the low
// word: comparing all 64 bits would let a caller slip TIOCSTI past an
// equality test by setting a high bit the kernel then ignores. The same holds
// on the i386 ABI, where seccomp_data carries the full 64-bit registers when
// a 64-bit process uses INT $0x80, while the compat calls read only the low
// halves.
//
// # Requirements
//
// Linux with seccomp filters, SECCOMP_RET_KILL_PROCESS (4.14) and TSYNC
// (3.17), on amd64. Elsewhere Install and Supported return ErrNotSupported.
package seccomp
