package seccomp

// action is what the filter does with one system call.
type action uint8

const (
	// allow lets the call through.
	allow action = iota
	// deny fails the call with EPERM, as Docker's default action does.
	deny
	// enosys fails the call with ENOSYS, the answer of a kernel that does not
	// have it, so that callers fall back to an older call (clone3 -> clone).
	enosys
	// checkClone allows clone unless its flags ask for a new namespace.
	checkClone
	// checkIoctl allows ioctl unless the request is TIOCSTI or TIOCLINUX.
	checkIoctl
	// checkPersonality allows only the personality values Docker allows.
	checkPersonality
	// checkSocket allows socket for every address family up to AF_MCTP
	// except AF_ALG and AF_VSOCK; the others fail with EAFNOSUPPORT.
	checkSocket
	// checkSocketcall allows the i386 socketcall multiplexer except its
	// SYS_SOCKET call, whose address family is in memory seccomp cannot read.
	checkSocketcall
)

// sysEntry is one system call: its kernel name, its number on the x86_64 ABI
// and on the i386 ABI (-1 where that ABI does not have it), and what the
// filter does with it on each ABI that has it.
type sysEntry struct {
	name   string
	amd64  int
	i386   int
	action action
}

// syscalls is the policy: every system call of the kernel's
// arch/x86/entry/syscalls/syscall_64.tbl and syscall_32.tbl up to number 471
// (rseq_slice_yield), sorted by name; the numbers are checked against
// golang.org/x/sys/unix by TestTable_MatchesXSys. A number
// that no row names (a gap, or a call newer than this table) fails with
// ENOSYS; see doc.go.
//
// The allowed set follows moby/profiles' seccomp default.json for a
// container without capabilities; where this table differs, the row says
// why. To change the policy, edit the action of a row; to add a new kernel
// call, add a row with both numbers.
var syscalls = []sysEntry{
	{"_llseek", -1, 140, allow},
	{"_newselect", -1, 142, allow},
	{"_sysctl", 156, 149, deny}, // removed from the kernel
	{"accept", 43, -1, allow},
	{"accept4", 288, 364, allow},
	{"access", 21, 33, allow},
	{"acct", 163, 51, deny},         // process accounting (CAP_SYS_PACCT)
	{"add_key", 248, 286, deny},     // kernel keyrings are not namespaced
	{"adjtimex", 159, 124, deny},    // Docker allows it (read-only without CAP_SYS_TIME); denied here: clock tuning
	{"afs_syscall", 183, 137, deny}, // never implemented
	{"alarm", 37, 27, allow},
	{"arch_prctl", 158, 384, allow},
	{"bdflush", -1, 134, deny}, // obsolete
	{"bind", 49, 361, allow},
	{"bpf", 321, 357, deny}, // loads kernel programs
	{"break", -1, 17, deny}, // never implemented
	{"brk", 12, 45, allow},
	{"cachestat", 451, 451, allow},
	{"capget", 125, 184, allow},
	{"capset", 126, 185, allow},
	{"chdir", 80, 12, allow},
	{"chmod", 90, 15, allow},
	{"chown", 92, 182, allow},
	{"chown32", -1, 212, allow},
	{"chroot", 161, 61, deny},          // chroot escapes; CAP_SYS_CHROOT is dropped anyway
	{"clock_adjtime", 305, 343, deny},  // Docker allows it (read-only without CAP_SYS_TIME); denied here: clock tuning
	{"clock_adjtime64", -1, 405, deny}, // Docker allows it (read-only without CAP_SYS_TIME); denied here: clock tuning
	{"clock_getres", 229, 266, allow},
	{"clock_getres_time64", -1, 406, allow},
	{"clock_gettime", 228, 265, allow},
	{"clock_gettime64", -1, 403, allow},
	{"clock_nanosleep", 230, 267, allow},
	{"clock_nanosleep_time64", -1, 407, allow},
	{"clock_settime", 227, 264, deny},  // sets the host clock
	{"clock_settime64", -1, 404, deny}, // sets the host clock
	{"clone", 56, 120, checkClone},     // denied when the flags ask for a new namespace
	{"clone3", 435, 435, enosys},       // its flags are in memory that seccomp cannot read; ENOSYS makes glibc fall back to clone
	{"close", 3, 6, allow},
	{"close_range", 436, 436, allow},
	{"connect", 42, 362, allow},
	{"copy_file_range", 326, 377, allow},
	{"creat", 85, 8, allow},
	{"create_module", 174, 127, deny}, // removed from the kernel
	{"delete_module", 176, 129, deny}, // kernel modules
	{"dup", 32, 41, allow},
	{"dup2", 33, 63, allow},
	{"dup3", 292, 330, allow},
	{"epoll_create", 213, 254, allow},
	{"epoll_create1", 291, 329, allow},
	{"epoll_ctl", 233, 255, allow},
	{"epoll_ctl_old", 214, -1, allow}, // never implemented; allowed as in Docker's profile
	{"epoll_pwait", 281, 319, allow},
	{"epoll_pwait2", 441, 441, allow},
	{"epoll_wait", 232, 256, allow},
	{"epoll_wait_old", 215, -1, allow}, // never implemented; allowed as in Docker's profile
	{"eventfd", 284, 323, allow},
	{"eventfd2", 290, 328, allow},
	{"execve", 59, 11, allow},
	{"execveat", 322, 358, allow},
	{"exit", 60, 1, allow},
	{"exit_group", 231, 252, allow},
	{"faccessat", 269, 307, allow},
	{"faccessat2", 439, 439, allow},
	{"fadvise64", 221, 250, allow},
	{"fadvise64_64", -1, 272, allow},
	{"fallocate", 285, 324, allow},
	{"fanotify_init", 300, 338, deny}, // watches the whole mount/filesystem
	{"fanotify_mark", 301, 339, allow},
	{"fchdir", 81, 133, allow},
	{"fchmod", 91, 94, allow},
	{"fchmodat", 268, 306, allow},
	{"fchmodat2", 452, 452, allow},
	{"fchown", 93, 95, allow},
	{"fchown32", -1, 207, allow},
	{"fchownat", 260, 298, allow},
	{"fcntl", 72, 55, allow},
	{"fcntl64", -1, 221, allow},
	{"fdatasync", 75, 148, allow},
	{"fgetxattr", 193, 231, allow},
	{"file_getattr", 468, 468, allow}, // not in Docker's profile yet; the same as the allowed FS_IOC_FSGETXATTR ioctl
	{"file_setattr", 469, 469, allow}, // not in Docker's profile yet; the same as the allowed FS_IOC_FSSETXATTR ioctl
	{"finit_module", 313, 350, deny},  // kernel modules
	{"flistxattr", 196, 234, allow},
	{"flock", 73, 143, allow},
	{"fork", 57, 2, allow},
	{"fremovexattr", 199, 237, allow},
	{"fsconfig", 431, 431, deny}, // mount family
	{"fsetxattr", 190, 228, allow},
	{"fsmount", 432, 432, deny}, // mount family
	{"fsopen", 430, 430, deny},  // mount family
	{"fspick", 433, 433, deny},  // mount family
	{"fstat", 5, 108, allow},
	{"fstat64", -1, 197, allow},
	{"fstatat64", -1, 300, allow},
	{"fstatfs", 138, 100, allow},
	{"fstatfs64", -1, 269, allow},
	{"fsync", 74, 118, allow},
	{"ftime", -1, 35, deny}, // never implemented
	{"ftruncate", 77, 93, allow},
	{"ftruncate64", -1, 194, allow},
	{"futex", 202, 240, allow},
	{"futex_requeue", 456, 456, allow},
	{"futex_time64", -1, 422, allow},
	{"futex_wait", 455, 455, allow},
	{"futex_waitv", 449, 449, allow},
	{"futex_wake", 454, 454, allow},
	{"futimesat", 261, 299, allow},
	{"get_kernel_syms", 177, 130, deny}, // removed from the kernel
	{"get_mempolicy", 239, 275, deny},   // NUMA policy (Docker: CAP_SYS_NICE)
	{"get_robust_list", 274, 312, allow},
	{"get_thread_area", 211, 244, allow},
	{"getcpu", 309, 318, allow},
	{"getcwd", 79, 183, allow},
	{"getdents", 78, 141, allow},
	{"getdents64", 217, 220, allow},
	{"getegid", 108, 50, allow},
	{"getegid32", -1, 202, allow},
	{"geteuid", 107, 49, allow},
	{"geteuid32", -1, 201, allow},
	{"getgid", 104, 47, allow},
	{"getgid32", -1, 200, allow},
	{"getgroups", 115, 80, allow},
	{"getgroups32", -1, 205, allow},
	{"getitimer", 36, 105, allow},
	{"getpeername", 52, 368, allow},
	{"getpgid", 121, 132, allow},
	{"getpgrp", 111, 65, allow},
	{"getpid", 39, 20, allow},
	{"getpmsg", 181, 188, deny}, // never implemented
	{"getppid", 110, 64, allow},
	{"getpriority", 140, 96, allow},
	{"getrandom", 318, 355, allow},
	{"getresgid", 120, 171, allow},
	{"getresgid32", -1, 211, allow},
	{"getresuid", 118, 165, allow},
	{"getresuid32", -1, 209, allow},
	{"getrlimit", 97, 76, allow},
	{"getrusage", 98, 77, allow},
	{"getsid", 124, 147, allow},
	{"getsockname", 51, 367, allow},
	{"getsockopt", 55, 365, allow},
	{"gettid", 186, 224, allow},
	{"gettimeofday", 96, 78, allow},
	{"getuid", 102, 24, allow},
	{"getuid32", -1, 199, allow},
	{"getxattr", 191, 229, allow},
	{"getxattrat", 464, 464, allow},
	{"gtty", -1, 32, deny},          // never implemented
	{"idle", -1, 112, deny},         // obsolete
	{"init_module", 175, 128, deny}, // kernel modules
	{"inotify_add_watch", 254, 292, allow},
	{"inotify_init", 253, 291, allow},
	{"inotify_init1", 294, 332, allow},
	{"inotify_rm_watch", 255, 293, allow},
	{"io_cancel", 210, 249, allow},
	{"io_destroy", 207, 246, allow},
	{"io_getevents", 208, 247, allow},
	{"io_pgetevents", 333, 385, allow},
	{"io_pgetevents_time64", -1, 416, allow},
	{"io_setup", 206, 245, allow},
	{"io_submit", 209, 248, allow},
	{"io_uring_enter", 426, 426, deny},    // io_uring bypasses seccomp for the operations it performs
	{"io_uring_register", 427, 427, deny}, // io_uring
	{"io_uring_setup", 425, 425, deny},    // io_uring
	{"ioctl", 16, 54, checkIoctl},         // TIOCSTI and TIOCLINUX denied
	{"ioperm", 173, 101, deny},            // raw port I/O
	{"iopl", 172, 110, deny},              // raw port I/O
	{"ioprio_get", 252, 290, allow},
	{"ioprio_set", 251, 289, allow},
	{"ipc", -1, 117, allow},
	{"kcmp", 312, 349, deny},           // compares kernel objects of other processes
	{"kexec_file_load", 320, -1, deny}, // boots another kernel
	{"kexec_load", 246, 283, deny},     // boots another kernel
	{"keyctl", 250, 288, deny},         // kernel keyrings are not namespaced
	{"kill", 62, 37, allow},
	{"landlock_add_rule", 445, 445, allow},
	{"landlock_create_ruleset", 444, 444, allow},
	{"landlock_restrict_self", 446, 446, allow},
	{"lchown", 94, 16, allow},
	{"lchown32", -1, 198, allow},
	{"lgetxattr", 192, 230, allow},
	{"link", 86, 9, allow},
	{"linkat", 265, 303, allow},
	{"listen", 50, 363, allow},
	{"listmount", 458, 458, allow}, // mount information, as /proc/self/mountinfo
	{"listns", 470, 470, deny},     // not in Docker's profile; enumerates namespaces
	{"listxattr", 194, 232, allow},
	{"listxattrat", 465, 465, allow},
	{"llistxattr", 195, 233, allow},
	{"lock", -1, 53, deny},             // never implemented
	{"lookup_dcookie", 212, 253, deny}, // profiling
	{"lremovexattr", 198, 236, allow},
	{"lseek", 8, 19, allow},
	{"lsetxattr", 189, 227, allow},
	{"lsm_get_self_attr", 459, 459, allow}, // Docker: CAP_SYS_ADMIN; allowed here: reads only the caller's own attributes
	{"lsm_list_modules", 461, 461, allow},  // Docker: CAP_SYS_ADMIN; allowed here: lists the active LSMs, as /sys/kernel/security/lsm
	{"lsm_set_self_attr", 460, 460, deny},  // changes LSM state
	{"lstat", 6, 107, allow},
	{"lstat64", -1, 196, allow},
	{"madvise", 28, 219, allow},
	{"map_shadow_stack", 453, 453, allow},
	{"mbind", 237, 274, deny}, // NUMA policy (Docker: CAP_SYS_NICE)
	{"membarrier", 324, 375, allow},
	{"memfd_create", 319, 356, allow},
	{"memfd_secret", 447, 447, allow},
	{"migrate_pages", 256, 294, deny}, // NUMA, other processes' memory
	{"mincore", 27, 218, allow},
	{"mkdir", 83, 39, allow},
	{"mkdirat", 258, 296, allow},
	{"mknod", 133, 14, allow},
	{"mknodat", 259, 297, allow},
	{"mlock", 149, 150, allow},
	{"mlock2", 325, 376, allow},
	{"mlockall", 151, 152, allow},
	{"mmap", 9, 90, allow},
	{"mmap2", -1, 192, allow},
	{"modify_ldt", 154, 123, allow},
	{"mount", 165, 21, deny},          // mount family
	{"mount_setattr", 442, 442, deny}, // mount family
	{"move_mount", 429, 429, deny},    // mount family
	{"move_pages", 279, 317, deny},    // NUMA, other processes' memory
	{"mprotect", 10, 125, allow},
	{"mpx", -1, 56, deny}, // never implemented
	{"mq_getsetattr", 245, 282, allow},
	{"mq_notify", 244, 281, allow},
	{"mq_open", 240, 277, allow},
	{"mq_timedreceive", 243, 280, allow},
	{"mq_timedreceive_time64", -1, 419, allow},
	{"mq_timedsend", 242, 279, allow},
	{"mq_timedsend_time64", -1, 418, allow},
	{"mq_unlink", 241, 278, allow},
	{"mremap", 25, 163, allow},
	{"mseal", 462, 462, allow},
	{"msgctl", 71, 402, allow},
	{"msgget", 68, 399, allow},
	{"msgrcv", 70, 401, allow},
	{"msgsnd", 69, 400, allow},
	{"msync", 26, 144, allow},
	{"munlock", 150, 151, allow},
	{"munlockall", 152, 153, allow},
	{"munmap", 11, 91, allow},
	{"name_to_handle_at", 303, 341, deny}, // Docker allows it; denied here: file handles pair with open_by_handle_at
	{"nanosleep", 35, 162, allow},
	{"newfstatat", 262, -1, allow},
	{"nfsservctl", 180, 169, deny}, // removed from the kernel
	{"nice", -1, 34, deny},         // obsolete (setpriority is allowed)
	{"oldfstat", -1, 28, deny},     // obsolete
	{"oldlstat", -1, 84, deny},     // obsolete
	{"oldolduname", -1, 59, deny},  // obsolete
	{"oldstat", -1, 18, deny},      // obsolete
	{"olduname", -1, 109, deny},    // obsolete
	{"open", 2, 5, allow},
	{"open_by_handle_at", 304, 342, deny}, // opens files outside the sandbox root
	{"open_tree", 428, 428, deny},         // mount family
	{"open_tree_attr", 467, 467, deny},    // not in Docker's profile; mount family
	{"openat", 257, 295, allow},
	{"openat2", 437, 437, allow},
	{"pause", 34, 29, allow},
	{"perf_event_open", 298, 336, deny},         // kernel profiling, side channels
	{"personality", 135, 136, checkPersonality}, // only the values Docker allows
	{"pidfd_getfd", 438, 438, deny},             // takes file descriptors from other processes
	{"pidfd_open", 434, 434, allow},
	{"pidfd_send_signal", 424, 424, allow},
	{"pipe", 22, 42, allow},
	{"pipe2", 293, 331, allow},
	{"pivot_root", 155, 217, deny}, // mount family
	{"pkey_alloc", 330, 381, allow},
	{"pkey_free", 331, 382, allow},
	{"pkey_mprotect", 329, 380, allow},
	{"poll", 7, 168, allow},
	{"ppoll", 271, 309, allow},
	{"ppoll_time64", -1, 414, allow},
	{"prctl", 157, 172, allow},
	{"pread64", 17, 180, allow},
	{"preadv", 295, 333, allow},
	{"preadv2", 327, 378, allow},
	{"prlimit64", 302, 340, allow},
	{"process_madvise", 440, 440, deny}, // acts on other processes' memory
	{"process_mrelease", 448, 448, allow},
	{"process_vm_readv", 310, 347, deny},  // Docker allows it on kernels >= 4.8; denied here: reads other processes' memory
	{"process_vm_writev", 311, 348, deny}, // Docker allows it on kernels >= 4.8; denied here: writes other processes' memory
	{"prof", -1, 44, deny},                // never implemented
	{"profil", -1, 98, deny},              // never implemented
	{"pselect6", 270, 308, allow},
	{"pselect6_time64", -1, 413, allow},
	{"ptrace", 101, 26, deny},   // Docker allows it on kernels >= 4.8; denied here: traces other processes
	{"putpmsg", 182, 189, deny}, // never implemented
	{"pwrite64", 18, 181, allow},
	{"pwritev", 296, 334, allow},
	{"pwritev2", 328, 379, allow},
	{"query_module", 178, 167, deny}, // removed from the kernel
	{"quotactl", 179, 131, deny},     // disk quotas
	{"quotactl_fd", 443, 443, deny},  // disk quotas
	{"read", 0, 3, allow},
	{"readahead", 187, 225, allow},
	{"readdir", -1, 89, deny}, // obsolete (getdents is allowed)
	{"readlink", 89, 85, allow},
	{"readlinkat", 267, 305, allow},
	{"readv", 19, 145, allow},
	{"reboot", 169, 88, deny},
	{"recvfrom", 45, 371, allow},
	{"recvmmsg", 299, 337, allow},
	{"recvmmsg_time64", -1, 417, allow},
	{"recvmsg", 47, 372, allow},
	{"remap_file_pages", 216, 257, allow},
	{"removexattr", 197, 235, allow},
	{"removexattrat", 466, 466, allow},
	{"rename", 82, 38, allow},
	{"renameat", 264, 302, allow},
	{"renameat2", 316, 353, allow},
	{"request_key", 249, 287, deny}, // kernel keyrings are not namespaced
	{"restart_syscall", 219, 0, allow},
	{"rmdir", 84, 40, allow},
	{"rseq", 334, 386, allow},
	{"rseq_slice_yield", 471, 471, allow}, // not in Docker's profile yet; a scheduling hint for the caller's own rseq slice
	{"rt_sigaction", 13, 174, allow},
	{"rt_sigpending", 127, 176, allow},
	{"rt_sigprocmask", 14, 175, allow},
	{"rt_sigqueueinfo", 129, 178, allow},
	{"rt_sigreturn", 15, 173, allow},
	{"rt_sigsuspend", 130, 179, allow},
	{"rt_sigtimedwait", 128, 177, allow},
	{"rt_sigtimedwait_time64", -1, 421, allow},
	{"rt_tgsigqueueinfo", 297, 335, allow},
	{"sched_get_priority_max", 146, 159, allow},
	{"sched_get_priority_min", 147, 160, allow},
	{"sched_getaffinity", 204, 242, allow},
	{"sched_getattr", 315, 352, allow},
	{"sched_getparam", 143, 155, allow},
	{"sched_getscheduler", 145, 157, allow},
	{"sched_rr_get_interval", 148, 161, allow},
	{"sched_rr_get_interval_time64", -1, 423, allow},
	{"sched_setaffinity", 203, 241, allow},
	{"sched_setattr", 314, 351, allow},
	{"sched_setparam", 142, 154, allow},
	{"sched_setscheduler", 144, 156, allow},
	{"sched_yield", 24, 158, allow},
	{"seccomp", 317, 354, allow},
	{"security", 185, -1, deny}, // never implemented
	{"select", 23, 82, allow},
	{"semctl", 66, 394, allow},
	{"semget", 64, 393, allow},
	{"semop", 65, -1, allow},
	{"semtimedop", 220, -1, allow},
	{"semtimedop_time64", -1, 420, allow},
	{"sendfile", 40, 187, allow},
	{"sendfile64", -1, 239, allow},
	{"sendmmsg", 307, 345, allow},
	{"sendmsg", 46, 370, allow},
	{"sendto", 44, 369, allow},
	{"set_mempolicy", 238, 276, deny},           // NUMA policy (Docker: CAP_SYS_NICE)
	{"set_mempolicy_home_node", 450, 450, deny}, // NUMA policy (Docker: CAP_SYS_NICE)
	{"set_robust_list", 273, 311, allow},
	{"set_thread_area", 205, 243, allow},
	{"set_tid_address", 218, 258, allow},
	{"setdomainname", 171, 121, deny}, // the sandbox's UTS name is set by the sandbox
	{"setfsgid", 123, 139, allow},
	{"setfsgid32", -1, 216, allow},
	{"setfsuid", 122, 138, allow},
	{"setfsuid32", -1, 215, allow},
	{"setgid", 106, 46, allow},
	{"setgid32", -1, 214, allow},
	{"setgroups", 116, 81, allow},
	{"setgroups32", -1, 206, allow},
	{"sethostname", 170, 74, deny}, // the sandbox's UTS name is set by the sandbox
	{"setitimer", 38, 104, allow},
	{"setns", 308, 346, deny}, // joins namespaces
	{"setpgid", 109, 57, allow},
	{"setpriority", 141, 97, allow},
	{"setregid", 114, 71, allow},
	{"setregid32", -1, 204, allow},
	{"setresgid", 119, 170, allow},
	{"setresgid32", -1, 210, allow},
	{"setresuid", 117, 164, allow},
	{"setresuid32", -1, 208, allow},
	{"setreuid", 113, 70, allow},
	{"setreuid32", -1, 203, allow},
	{"setrlimit", 160, 75, allow},
	{"setsid", 112, 66, allow},
	{"setsockopt", 54, 366, allow},
	{"settimeofday", 164, 79, deny}, // sets the host clock
	{"setuid", 105, 23, allow},
	{"setuid32", -1, 213, allow},
	{"setxattr", 188, 226, allow},
	{"setxattrat", 463, 463, allow},
	{"sgetmask", -1, 68, deny}, // obsolete
	{"shmat", 30, 397, allow},
	{"shmctl", 31, 396, allow},
	{"shmdt", 67, 398, allow},
	{"shmget", 29, 395, allow},
	{"shutdown", 48, 373, allow},
	{"sigaction", -1, 67, deny}, // obsolete (rt_sigaction is allowed)
	{"sigaltstack", 131, 186, allow},
	{"signal", -1, 48, deny}, // obsolete (rt_sigaction is allowed)
	{"signalfd", 282, 321, allow},
	{"signalfd4", 289, 327, allow},
	{"sigpending", -1, 73, deny}, // obsolete (rt_sigpending is allowed)
	{"sigprocmask", -1, 126, allow},
	{"sigreturn", -1, 119, allow},
	{"sigsuspend", -1, 72, deny},             // obsolete (rt_sigsuspend is allowed)
	{"socket", 41, 359, checkSocket},         // AF_ALG, AF_VSOCK, AF_UNSPEC and families after AF_MCTP fail with EAFNOSUPPORT
	{"socketcall", -1, 102, checkSocketcall}, // not filtered by Docker; its SYS_SOCKET call is denied here (the family is in memory)
	{"socketpair", 53, 360, allow},
	{"splice", 275, 313, allow},
	{"ssetmask", -1, 69, deny}, // obsolete
	{"stat", 4, 106, allow},
	{"stat64", -1, 195, allow},
	{"statfs", 137, 99, allow},
	{"statfs64", -1, 268, allow},
	{"statmount", 457, 457, allow}, // mount information, as /proc/self/mountinfo
	{"statx", 332, 383, allow},
	{"stime", -1, 25, deny},     // sets the host clock
	{"stty", -1, 31, deny},      // never implemented
	{"swapoff", 168, 115, deny}, // swap
	{"swapon", 167, 87, deny},   // swap
	{"symlink", 88, 83, allow},
	{"symlinkat", 266, 304, allow},
	{"sync", 162, 36, allow},
	{"sync_file_range", 277, 314, allow},
	{"syncfs", 306, 344, allow},
	{"sysfs", 139, 135, deny}, // obsolete
	{"sysinfo", 99, 116, allow},
	{"syslog", 103, 103, deny}, // kernel log
	{"tee", 276, 315, allow},
	{"tgkill", 234, 270, allow},
	{"time", 201, 13, allow},
	{"timer_create", 222, 259, allow},
	{"timer_delete", 226, 263, allow},
	{"timer_getoverrun", 225, 262, allow},
	{"timer_gettime", 224, 261, allow},
	{"timer_gettime64", -1, 408, allow},
	{"timer_settime", 223, 260, allow},
	{"timer_settime64", -1, 409, allow},
	{"timerfd_create", 283, 322, allow},
	{"timerfd_gettime", 287, 326, allow},
	{"timerfd_gettime64", -1, 410, allow},
	{"timerfd_settime", 286, 325, allow},
	{"timerfd_settime64", -1, 411, allow},
	{"times", 100, 43, allow},
	{"tkill", 200, 238, allow},
	{"truncate", 76, 92, allow},
	{"truncate64", -1, 193, allow},
	{"tuxcall", 184, -1, deny}, // never implemented
	{"ugetrlimit", -1, 191, allow},
	{"ulimit", -1, 58, deny}, // never implemented
	{"umask", 95, 60, allow},
	{"umount", -1, 22, deny},   // mount family
	{"umount2", 166, 52, deny}, // mount family
	{"uname", 63, 122, allow},
	{"unlink", 87, 10, allow},
	{"unlinkat", 263, 301, allow},
	{"unshare", 272, 310, deny},     // creates namespaces
	{"uprobe", 336, -1, allow},      // not in Docker's profile yet; like uretprobe, only works from a kernel uprobe trampoline
	{"uretprobe", 335, -1, allow},   // only works from a kernel uprobe trampoline; denying it crashes traced processes
	{"uselib", 134, 86, deny},       // obsolete
	{"userfaultfd", 323, 374, deny}, // used to widen kernel race windows
	{"ustat", 136, 62, deny},        // obsolete
	{"utime", 132, 30, allow},
	{"utimensat", 280, 320, allow},
	{"utimensat_time64", -1, 412, allow},
	{"utimes", 235, 271, allow},
	{"vfork", 58, 190, allow},
	{"vhangup", 153, 111, deny}, // hangs up the terminal
	{"vm86", -1, 166, deny},     // virtual 8086 mode
	{"vm86old", -1, 113, deny},  // virtual 8086 mode
	{"vmsplice", 278, 316, allow},
	{"vserver", 236, 273, deny}, // never implemented
	{"wait4", 61, 114, allow},
	{"waitid", 247, 284, allow},
	{"waitpid", -1, 7, allow},
	{"write", 1, 4, allow},
	{"writev", 20, 146, allow},
}
