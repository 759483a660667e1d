package seccomp

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/sandbox/seccomp/internal/int80"
)

// A probe is one system call the child makes, once under the filter and once
// without it (the control run). Its arguments are chosen so that the call
// cannot do anything when the filter lets it through: null pointers, bad
// file descriptors, invalid flags, a wrong reboot magic... so that without
// the filter the kernel answers with some other error (EFAULT, EBADF,
// EINVAL, ENOSYS) or does nothing. The filtered result must be want; for
// probes the filter decides, the control result must differ (as root), which
// proves that the filter, not the kernel, refused the call.
type probe struct {
	name    string
	i386    bool       // made with INT $0x80 (i386 numbers), not SYSCALL
	nr      uint64     // system call number
	args    [6]uint64  // argPPID and argPID are replaced at run time
	control *[6]uint64 // arguments for the control run, where args would do harm unfiltered
	want    unix.Errno // errno under the filter, 0 for success
	// filter is true when the filter decides the call: the control run must
	// then fail differently.
	filter bool
	// kernelMayRefuse marks probes whose control run may fail with want
	// for reasons of this machine (a sysctl, a missing kernel feature): the
	// control check only logs.
	kernelMayRefuse bool
	closeFD         bool // a successful call returns a descriptor to close
	isPID           bool // a successful call returns the caller's pid
	// detachPPID: undo a successful PTRACE_ATTACH of the parent.
	detachPPID bool
}

// A probeResult is what the child reports for one probe.
type probeResult struct {
	Name  string
	Val   int64
	Errno uint32
}

const (
	argPPID = 1<<63 | 0x7070 // replaced by the child's parent pid
	argPID  = 1<<63 | 0x7071 // replaced by the child's pid
	m1      = 0xffffffff     // -1 as the kernel reads an int argument
	hi      = 0xdeadbeef00000000

	ptraceAttach = 16
	ptraceCont   = 7
	ptraceDetach = 17

	readImpliesExec = 0x0400000
	addrNoRandomize = 0x0040000
	tcgets          = 0x5401
	x32             = 0x40000000
)

var nsFlags = []struct {
	name string
	flag uint64
}{
	{"NEWNS", unix.CLONE_NEWNS}, {"NEWUTS", unix.CLONE_NEWUTS}, {"NEWIPC", unix.CLONE_NEWIPC},
	{"NEWUSER", unix.CLONE_NEWUSER}, {"NEWPID", unix.CLONE_NEWPID}, {"NEWNET", unix.CLONE_NEWNET},
	{"NEWCGROUP", unix.CLONE_NEWCGROUP}, {"NEWTIME", unix.CLONE_NEWTIME},
}

func denied(name string, nr uint64, args ...uint64) probe {
	p := probe{name: name, nr: nr, want: unix.EPERM, filter: true}
	copy(p.args[:], args)
	return p
}

func allowed(name string, nr uint64, want unix.Errno, args ...uint64) probe {
	p := probe{name: name, nr: nr, want: want}
	copy(p.args[:], args)
	return p
}

func (p probe) with(f func(*probe)) probe { f(&p); return p }

func mayRefuse(p *probe) { p.kernelMayRefuse = true }
func closeFD(p *probe)   { p.closeFD = true }

// x86_64Probes are made with the SYSCALL instruction.
func x86_64Probes() []probe {
	ps := []probe{
		// The mount family.
		denied("mount", unix.SYS_MOUNT, 0, 0, 0, 0, 0),
		denied("umount2", unix.SYS_UMOUNT2, 0, 0),
		denied("mount_setattr", unix.SYS_MOUNT_SETATTR, m1, 0, 0, 0, 0),
		denied("open_tree", unix.SYS_OPEN_TREE, m1, 0, 0),
		denied("move_mount", unix.SYS_MOVE_MOUNT, m1, 0, m1, 0, 0),
		denied("fsopen", unix.SYS_FSOPEN, 0, 0),
		denied("fsconfig", unix.SYS_FSCONFIG, m1, 0, 0, 0, 0),
		denied("fsmount", unix.SYS_FSMOUNT, m1, 0, 0),
		denied("fspick", unix.SYS_FSPICK, m1, 0, 0),
		denied("pivot_root", unix.SYS_PIVOT_ROOT, 0, 0),
		denied("chroot", unix.SYS_CHROOT, 0),
		// Namespaces. unshare(CLONE_NEWUSER) is EINVAL unfiltered: the
		// process has several threads.
		denied("unshare(CLONE_NEWUSER)", unix.SYS_UNSHARE, unix.CLONE_NEWUSER),
		denied("setns", unix.SYS_SETNS, m1, 0),
		denied("listns", unix.SYS_LISTNS, 0, 0, 0, 0),
		// Kernel attack surface.
		denied("bpf", unix.SYS_BPF, m1, 0, 0),
		denied("perf_event_open", unix.SYS_PERF_EVENT_OPEN, 0, 0, m1, m1, 0),
		denied("io_uring_setup", unix.SYS_IO_URING_SETUP, 0, 0).with(mayRefuse),
		denied("io_uring_enter", unix.SYS_IO_URING_ENTER, m1, 0, 0, 0, 0, 0),
		denied("io_uring_register", unix.SYS_IO_URING_REGISTER, m1, 0, 0, 0),
		denied("userfaultfd", unix.SYS_USERFAULTFD, m1),
		denied("keyctl", unix.SYS_KEYCTL, 0xffff, 0, 0),
		denied("add_key", unix.SYS_ADD_KEY, 0, 0, 0, 0, 0),
		denied("request_key", unix.SYS_REQUEST_KEY, 0, 0, 0, 0),
		denied("open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, m1, 0, 0),
		denied("name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, m1, 0, 0, 0, 0),
		denied("fanotify_init", unix.SYS_FANOTIFY_INIT, m1, 0),
		denied("lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE, 0, 0, 0),
		// Other processes. The parent is a throwaway process between the
		// test and the prober (see startProbes), so that a filter that lets
		// PTRACE_ATTACH through cannot stop the test itself. The control run
		// asks PTRACE_CONT, which is ESRCH.
		denied("ptrace(PTRACE_ATTACH, parent)", unix.SYS_PTRACE, ptraceAttach, argPPID).with(func(p *probe) {
			p.control = &[6]uint64{ptraceCont, argPPID}
			p.detachPPID = true
		}),
		denied("process_vm_readv(parent)", unix.SYS_PROCESS_VM_READV, argPPID, 0, 0, 0, 0, 0),
		denied("process_vm_writev(parent)", unix.SYS_PROCESS_VM_WRITEV, argPPID, 0, 0, 0, 0, 0),
		denied("pidfd_getfd", unix.SYS_PIDFD_GETFD, m1, 0, 0),
		denied("kcmp", unix.SYS_KCMP, argPID, argPID, 0xffff, 0, 0),
		denied("process_madvise", unix.SYS_PROCESS_MADVISE, m1, 0, 0, 0, 0),
		// The machine. reboot's magic is wrong, kexec_load's segment count
		// too large, the clock pointers null.
		denied("reboot", unix.SYS_REBOOT, 0, 0, 0, 0),
		denied("kexec_load", unix.SYS_KEXEC_LOAD, 0, 0xffffffff, 0, 0),
		denied("kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, m1, m1, 0, 0, 0xffffffff),
		denied("init_module", unix.SYS_INIT_MODULE, 0, 0, 0),
		denied("finit_module", unix.SYS_FINIT_MODULE, m1, 0, 0),
		denied("delete_module", unix.SYS_DELETE_MODULE, 0, 0),
		denied("swapon", unix.SYS_SWAPON, 0, 0),
		denied("swapoff", unix.SYS_SWAPOFF, 0),
		denied("clock_settime", unix.SYS_CLOCK_SETTIME, 0, 0),
		denied("settimeofday(NULL, NULL)", unix.SYS_SETTIMEOFDAY, 0, 0),
		denied("adjtimex", unix.SYS_ADJTIMEX, 0),
		denied("clock_adjtime", unix.SYS_CLOCK_ADJTIME, 0, 0),
		denied("acct(NULL)", unix.SYS_ACCT, 0),
		denied("quotactl", unix.SYS_QUOTACTL, 0, 0, 0, 0),
		denied("syslog(SIZE_BUFFER)", unix.SYS_SYSLOG, 10, 0, 0),
		// The child has no controlling terminal (Setsid): vhangup is a no-op
		// unfiltered.
		denied("vhangup", unix.SYS_VHANGUP),
		denied("iopl(4)", unix.SYS_IOPL, 4),
		denied("ioperm", unix.SYS_IOPERM, 0, 0, 0),
		denied("sethostname", unix.SYS_SETHOSTNAME, 0, m1),
		denied("setdomainname", unix.SYS_SETDOMAINNAME, 0, m1),
		denied("mbind", unix.SYS_MBIND, 0, 0, 0, 0, 0, 0),
		denied("set_mempolicy", unix.SYS_SET_MEMPOLICY, 0xffff, 0, 0),
		denied("get_mempolicy", unix.SYS_GET_MEMPOLICY, 0, 0, 0, 0, 0),
		denied("lsm_set_self_attr", unix.SYS_LSM_SET_SELF_ATTR, 0, 0, 0, 0),
		denied("uselib", unix.SYS_USELIB, 0),
		// personality: the control run really sets it; the next probe puts
		// it back.
		denied("personality(READ_IMPLIES_EXEC)", unix.SYS_PERSONALITY, readImpliesExec),
		allowed("personality(PER_LINUX)", unix.SYS_PERSONALITY, 0, 0),
		denied("personality(ADDR_NO_RANDOMIZE)", unix.SYS_PERSONALITY, addrNoRandomize),
		allowed("personality(PER_LINUX) again", unix.SYS_PERSONALITY, 0, 0),
		denied("personality(READ_IMPLIES_EXEC, garbage upper half)", unix.SYS_PERSONALITY, hi|readImpliesExec),
		allowed("personality(PER_LINUX) once more", unix.SYS_PERSONALITY, 0, 0),
		allowed("personality(query, garbage upper half)", unix.SYS_PERSONALITY, 0, 1<<32|0xffffffff),
		// clone3's flags are out of reach: ENOSYS, for the fallback to clone.
		denied("clone3", unix.SYS_CLONE3, 0, 0).with(func(p *probe) { p.want = unix.ENOSYS }),
		// ioctl
		denied("ioctl(TIOCSTI)", unix.SYS_IOCTL, m1, unix.TIOCSTI, 0),
		denied("ioctl(TIOCSTI, garbage upper half)", unix.SYS_IOCTL, m1, hi|unix.TIOCSTI, 0),
		denied("ioctl(TIOCLINUX)", unix.SYS_IOCTL, m1, unix.TIOCLINUX, 0),
		allowed("ioctl(TCGETS)", unix.SYS_IOCTL, unix.EBADF, m1, tcgets, 0),
		allowed("ioctl(TCGETS, TIOCSTI in the upper half)", unix.SYS_IOCTL, unix.EBADF, m1, unix.TIOCSTI<<32|tcgets, 0),
		// socket
		denied("socket(AF_VSOCK)", unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0).with(func(p *probe) {
			p.want, p.closeFD = unix.EAFNOSUPPORT, true
		}),
		denied("socket(AF_VSOCK, garbage upper half)", unix.SYS_SOCKET, hi|unix.AF_VSOCK, unix.SOCK_STREAM, 0).with(func(p *probe) {
			p.want, p.closeFD = unix.EAFNOSUPPORT, true
		}),
		// AF_ALG is not built into this test machine's kernel: its control
		// run fails with EAFNOSUPPORT too.
		denied("socket(AF_ALG)", unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0).with(func(p *probe) {
			p.want, p.closeFD, p.kernelMayRefuse = unix.EAFNOSUPPORT, true, true
		}),
		allowed("socket(AF_UNIX)", unix.SYS_SOCKET, 0, unix.AF_UNIX, unix.SOCK_STREAM, 0).with(closeFD),
		allowed("socket(AF_INET)", unix.SYS_SOCKET, 0, unix.AF_INET, unix.SOCK_DGRAM, 0).with(closeFD),
		allowed("socket(AF_NETLINK)", unix.SYS_SOCKET, 0, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE).with(closeFD),
		// The x32 ABI: this kernel has none (ENOSYS unfiltered); the filter
		// denies it before the kernel could look.
		denied("x32 getpid", x32|unix.SYS_GETPID),
		denied("x32 read", x32|unix.SYS_READ, m1, 0, 0),
		denied("x32 mount", x32|unix.SYS_MOUNT, 0, 0, 0, 0, 0),
		// Allowed calls and numbers the table does not know.
		allowed("getpid", unix.SYS_GETPID, 0).with(func(p *probe) { p.isPID = true }),
		allowed("number 400 (no such call)", 400, unix.ENOSYS),
		allowed("number 1000 (no such call)", 1000, unix.ENOSYS),
	}
	for _, f := range nsFlags {
		// CLONE_THREAD without CLONE_SIGHAND is EINVAL unfiltered, before
		// any namespace is made.
		ps = append(ps, denied("clone(CLONE_"+f.name+"|CLONE_THREAD)", unix.SYS_CLONE, f.flag|unix.CLONE_THREAD, 0, 0, 0, 0))
	}
	ps = append(ps,
		denied("clone(CLONE_NEWNS|CLONE_THREAD, garbage upper half)", unix.SYS_CLONE, hi|unix.CLONE_NEWNS|unix.CLONE_THREAD, 0, 0, 0, 0),
		allowed("clone(CLONE_THREAD, CLONE_NEWNS in the upper half)", unix.SYS_CLONE, unix.EINVAL, unix.CLONE_NEWNS<<32|unix.CLONE_THREAD, 0, 0, 0, 0),
	)
	return ps
}

// i386Probes are made with INT $0x80 and i386 numbers, written out here
// rather than taken from the table so that they check it.
func i386Probes() []probe {
	const (
		nrMount          = 21
		nrUmount         = 22
		nrUmount2        = 52
		nrUnshare        = 310
		nrSetns          = 346
		nrBPF            = 357
		nrPtrace         = 26
		nrIOUringSetup   = 425
		nrPerfEventOpen  = 336
		nrKeyctl         = 288
		nrAddKey         = 286
		nrReboot         = 88
		nrPersonality    = 136
		nrSwapon         = 87
		nrClockSettime   = 264
		nrClockSettime64 = 404
		nrSettimeofday   = 79
		nrStime          = 25
		nrClone          = 120
		nrClone3         = 435
		nrIoctl          = 54
		nrSocketcall     = 102
		nrSocket         = 359
		nrKexecLoad      = 283
		nrInitModule     = 128
		nrUserfaultfd    = 374
		nrOpenByHandleAt = 342
		nrProcessVMReadv = 347
		nrChroot         = 61
		nrPivotRoot      = 217
		nrIopl           = 110
		nrFsopen         = 430
		nrOpenTree       = 428
		nrVM86old        = 113
		nrGetpid         = 20
		nrGetppid        = 64
		nrSyslog         = 103
	)
	ps := []probe{
		denied("mount", nrMount, 0, 0, 0, 0, 0),
		denied("umount", nrUmount, 0),
		denied("umount2", nrUmount2, 0, 0),
		denied("fsopen", nrFsopen, 0, 0),
		denied("open_tree", nrOpenTree, m1, 0, 0),
		denied("pivot_root", nrPivotRoot, 0, 0),
		denied("chroot", nrChroot, 0),
		denied("unshare(CLONE_NEWUSER)", nrUnshare, unix.CLONE_NEWUSER),
		denied("setns", nrSetns, m1, 0),
		denied("bpf", nrBPF, m1, 0, 0),
		denied("perf_event_open", nrPerfEventOpen, 0, 0, m1, m1, 0),
		denied("io_uring_setup", nrIOUringSetup, 0, 0).with(mayRefuse),
		denied("userfaultfd", nrUserfaultfd, m1),
		denied("keyctl", nrKeyctl, 0xffff, 0, 0),
		denied("add_key", nrAddKey, 0, 0, 0, 0, 0),
		denied("open_by_handle_at", nrOpenByHandleAt, m1, 0, 0),
		denied("ptrace(PTRACE_ATTACH, parent)", nrPtrace, ptraceAttach, argPPID).with(func(p *probe) {
			p.control = &[6]uint64{ptraceCont, argPPID}
			p.detachPPID = true
		}),
		denied("process_vm_readv(parent)", nrProcessVMReadv, argPPID, 0, 0, 0, 0, 0),
		denied("reboot", nrReboot, 0, 0, 0, 0),
		denied("kexec_load", nrKexecLoad, 0, 0xffffffff, 0, 0),
		denied("init_module", nrInitModule, 0, 0, 0),
		denied("swapon", nrSwapon, 0, 0),
		denied("clock_settime", nrClockSettime, 0, 0),
		denied("clock_settime64", nrClockSettime64, 0, 0),
		denied("settimeofday(NULL, NULL)", nrSettimeofday, 0, 0),
		denied("stime", nrStime, 0),
		denied("iopl(4)", nrIopl, 4),
		denied("vm86old", nrVM86old, 0),
		denied("syslog(SIZE_BUFFER)", nrSyslog, 10, 0, 0),
		denied("personality(READ_IMPLIES_EXEC)", nrPersonality, readImpliesExec),
		allowed("personality(PER_LINUX)", nrPersonality, 0, 0),
		denied("personality(READ_IMPLIES_EXEC, garbage upper half)", nrPersonality, hi|readImpliesExec),
		allowed("personality(PER_LINUX) again", nrPersonality, 0, 0),
		allowed("personality(query, garbage upper half)", nrPersonality, 0, 1<<32|0xffffffff),
		denied("clone(CLONE_NEWNS|CLONE_THREAD)", nrClone, unix.CLONE_NEWNS|unix.CLONE_THREAD),
		denied("clone(CLONE_NEWUSER|CLONE_THREAD)", nrClone, unix.CLONE_NEWUSER|unix.CLONE_THREAD),
		denied("clone(CLONE_NEWNET|CLONE_THREAD)", nrClone, unix.CLONE_NEWNET|unix.CLONE_THREAD),
		denied("clone(CLONE_NEWPID|CLONE_THREAD, garbage upper half)", nrClone, hi|unix.CLONE_NEWPID|unix.CLONE_THREAD),
		allowed("clone(CLONE_THREAD, CLONE_NEWNS in the upper half)", nrClone, unix.EINVAL, unix.CLONE_NEWNS<<32|unix.CLONE_THREAD),
		denied("clone3", nrClone3, 0, 0).with(func(p *probe) { p.want = unix.ENOSYS }),
		denied("ioctl(TIOCSTI)", nrIoctl, m1, unix.TIOCSTI, 0),
		denied("ioctl(TIOCSTI, garbage upper half)", nrIoctl, m1, hi|unix.TIOCSTI, 0),
		allowed("ioctl(TCGETS)", nrIoctl, unix.EBADF, m1, tcgets, 0),
		// socketcall(SYS_SOCKET, NULL): EFAULT unfiltered.
		denied("socketcall(SYS_SOCKET)", nrSocketcall, 1, 0),
		denied("socketcall(SYS_SOCKET, garbage upper half)", nrSocketcall, hi|1, 0),
		allowed("socketcall(SYS_SOCKETPAIR)", nrSocketcall, unix.EFAULT, 8, 0),
		denied("socket(AF_VSOCK)", nrSocket, unix.AF_VSOCK, unix.SOCK_STREAM, 0).with(func(p *probe) {
			p.want, p.closeFD = unix.EAFNOSUPPORT, true
		}),
		allowed("socket(AF_UNIX)", nrSocket, 0, unix.AF_UNIX, unix.SOCK_STREAM, 0).with(closeFD),
		allowed("getpid", nrGetpid, 0).with(func(p *probe) { p.isPID = true }),
		allowed("getppid", nrGetppid, 0),
		allowed("number 1000 (no such call)", 1000, unix.ENOSYS),
	}
	for i := range ps {
		ps[i].i386 = true
	}
	return ps
}

func allProbes() []probe {
	var out []probe
	for _, p := range x86_64Probes() {
		p.name = "x86_64/" + p.name
		out = append(out, p)
	}
	for _, p := range i386Probes() {
		p.name = "i386/" + p.name
		out = append(out, p)
	}
	return out
}

// call makes the probe's system call with args and returns the value and
// errno as the ABI reports them.
func (p probe) call(args [6]uint64) (int64, unix.Errno) {
	for i, a := range args {
		switch a {
		case argPPID:
			args[i] = uint64(os.Getppid())
		case argPID:
			args[i] = uint64(os.Getpid())
		}
	}
	if p.i386 {
		v, e := int80.Errno(int80.Syscall(p.nr, args[0], args[1], args[2], args[3], args[4], args[5]))
		return int64(v), unix.Errno(e)
	}
	r, _, e := unix.RawSyscall6(uintptr(p.nr), uintptr(args[0]), uintptr(args[1]), uintptr(args[2]),
		uintptr(args[3]), uintptr(args[4]), uintptr(args[5]))
	return int64(r), e
}

// run makes the probe in the child, filtered or not, and undoes what a
// successful call did.
func (p probe) run(filtered bool) probeResult {
	args := p.args
	if !filtered && p.control != nil {
		args = *p.control
	}
	v, e := p.call(args)
	if e == 0 {
		if p.closeFD && v >= 0 {
			unix.Close(int(v))
		}
		if p.detachPPID {
			// Through the same ABI as the attach, which the filter (wrongly)
			// let through; then SIGCONT in case the stop stuck anyway.
			p.call([6]uint64{ptraceDetach, argPPID})
			unix.Kill(os.Getppid(), unix.SIGCONT)
		}
	}
	return probeResult{Name: p.name, Val: v, Errno: uint32(e)}
}
