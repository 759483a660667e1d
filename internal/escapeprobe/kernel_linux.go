//go:build linux

package main

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// negOne is -1 as a raw syscall argument (an invalid fd).
const negOne = ^uintptr(0)

// bpfProgLoadAttr is the start of union bpf_attr for BPF_PROG_LOAD.
type bpfProgLoadAttr struct {
	progType    uint32
	insnCnt     uint32
	insns       uint64
	license     uint64
	logLevel    uint32
	logSize     uint32
	logBuf      uint64
	kernVersion uint32
	progFlags   uint32
}

// bpfMapCreateAttr is the start of union bpf_attr for BPF_MAP_CREATE.
type bpfMapCreateAttr struct {
	mapType    uint32
	keySize    uint32
	valueSize  uint32
	maxEntries uint32
	mapFlags   uint32
}

const (
	bpfMapCreate          = 0
	bpfProgLoad           = 5
	bpfMapTypeArray       = 2
	bpfProgTypeSockFilter = 1
)

// checkBPF: BPF_PROG_LOAD of a socket filter "r0 = 0; exit" and
// BPF_MAP_CREATE of a one-entry array (both closed at once).
func checkBPF(*options) []attempt {
	insns := []uint64{0xb7, 0x95} // BPF_ALU64|BPF_MOV|BPF_K r0=0; BPF_JMP|BPF_EXIT
	license := []byte("GPL\x00")
	prog := bpfProgLoadAttr{
		progType: bpfProgTypeSockFilter,
		insnCnt:  uint32(len(insns)),
		insns:    uint64(uintptr(unsafe.Pointer(&insns[0]))),
		license:  uint64(uintptr(unsafe.Pointer(&license[0]))),
	}
	fd, _, e := unix.Syscall(unix.SYS_BPF, bpfProgLoad, uintptr(unsafe.Pointer(&prog)), unsafe.Sizeof(prog))
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	closeIfOK(fd, e)
	atts := []attempt{filtered("prog_load", errnoOf(e))}

	m := bpfMapCreateAttr{mapType: bpfMapTypeArray, keySize: 4, valueSize: 4, maxEntries: 1}
	fd, _, e = unix.Syscall(unix.SYS_BPF, bpfMapCreate, uintptr(unsafe.Pointer(&m)), unsafe.Sizeof(m))
	closeIfOK(fd, e)
	return append(atts, filtered("map_create", errnoOf(e)))
}

func closeIfOK(fd uintptr, e unix.Errno) {
	if e == 0 {
		unix.Close(int(fd))
	}
}

// checkPerf: perf_event_open of a software dummy event on the probe itself,
// user space only, which perf_event_paranoid <= 2 lets anyone open.
func checkPerf(*options) []attempt {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_DUMMY,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return []attempt{filtered("perf_event_open", err)}
}

// checkIOUring: io_uring_setup of a one-entry ring (closed at once), and
// io_uring_enter / io_uring_register on fd -1 (EBADF means reached).
func checkIOUring(*options) []attempt {
	var params [120]byte // struct io_uring_params
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	closeIfOK(fd, e)
	atts := []attempt{filtered("setup", errnoOf(e))}
	_, _, e = unix.Syscall6(unix.SYS_IO_URING_ENTER, negOne, 0, 0, 0, 0, 0)
	atts = append(atts, filtered("enter", errnoOf(e)))
	_, _, e = unix.Syscall6(unix.SYS_IO_URING_REGISTER, negOne, 0, 0, 0, 0, 0)
	return append(atts, filtered("register", errnoOf(e)))
}

const uffdUserModeOnly = 1 // UFFD_USER_MODE_ONLY

// checkUserfaultfd: the userfaultfd syscall (user-mode only, which needs
// no privilege) and opening /dev/userfaultfd.
func checkUserfaultfd(*options) []attempt {
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|uffdUserModeOnly, 0, 0)
	closeIfOK(fd, e)
	atts := []attempt{filtered("syscall", errnoOf(e))}
	dfd, err := unix.Open("/dev/userfaultfd", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(dfd)
	}
	return append(atts, denied("/dev/userfaultfd", err))
}

// checkKeyctl: add_key of a "user" key to the probe's own process keyring
// (invalidated at once), keyctl(GET_KEYRING_ID) of that keyring, and
// request_key of an absent key with no callout (no upcall).
func checkKeyctl(*options) []attempt {
	id, err := unix.AddKey("user", "escapeprobe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	if err == nil {
		unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0)
	}
	atts := []attempt{filtered("add_key", err)}
	_, err = unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0, 0)
	atts = append(atts, filtered("keyctl", err))
	typ, _ := unix.BytePtrFromString("user")
	desc, _ := unix.BytePtrFromString("escapeprobe-absent-" + itoa(unix.Getpid()))
	ring := unix.KEY_SPEC_PROCESS_KEYRING
	_, _, e := unix.Syscall6(unix.SYS_REQUEST_KEY, uintptr(unsafe.Pointer(typ)), uintptr(unsafe.Pointer(desc)), 0,
		uintptr(ring), 0, 0)
	runtime.KeepAlive(typ)
	runtime.KeepAlive(desc)
	return append(atts, filtered("request_key", errnoOf(e)))
}

// checkOpenByHandle: name_to_handle_at("/") then open_by_handle_at (the
// "shocker" escape needs only the second); a made-up handle when the first
// is refused.
func checkOpenByHandle(*options) []attempt {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
	if err != nil {
		h = unix.NewFileHandle(1, make([]byte, 8))
	}
	mfd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return []attempt{errorAttempt("open_by_handle_at", err)}
	}
	defer unix.Close(mfd)
	fd, err := unix.OpenByHandleAt(mfd, h, unix.O_RDONLY|unix.O_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return []attempt{filtered("open_by_handle_at", err)}
}

// checkKexec: kexec_load with too many segments and an unknown flag, and
// kexec_file_load with an unknown flag: both EINVAL once past the
// permission check, never loading or unloading anything.
func checkKexec(*options) []attempt {
	_, _, e := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0xffff, 0, 0x8000, 0, 0)
	atts := []attempt{filtered("kexec_load", errnoOf(e))}
	_, _, e = unix.Syscall6(sysKexecFileLoad, negOne, negOne, 0, 0, 0x80000000, 0)
	return append(atts, filtered("kexec_file_load", errnoOf(e)))
}

// checkModule: init_module of an empty image (ENOEXEC), finit_module of fd
// -1 (EBADF) and delete_module of a module that does not exist (ENOENT).
func checkModule(*options) []attempt {
	empty, _ := unix.BytePtrFromString("")
	_, _, e := unix.Syscall(unix.SYS_INIT_MODULE, 0, 0, uintptr(unsafe.Pointer(empty)))
	atts := []attempt{filtered("init_module", errnoOf(e))}
	_, _, e = unix.Syscall(unix.SYS_FINIT_MODULE, negOne, uintptr(unsafe.Pointer(empty)), 0)
	runtime.KeepAlive(empty)
	atts = append(atts, filtered("finit_module", errnoOf(e)))
	return append(atts, filtered("delete_module", unix.DeleteModule("escapeprobe_absent", unix.O_NONBLOCK)))
}

// checkReboot: reboot with wrong magic numbers: EINVAL once past the
// CAP_SYS_BOOT check, without doing anything.
func checkReboot(*options) []attempt {
	_, _, e := unix.Syscall6(unix.SYS_REBOOT, 0, 0, unix.LINUX_REBOOT_CMD_CAD_OFF, 0, 0, 0)
	return []attempt{filtered("reboot", errnoOf(e))}
}

// swapPath never exists (procfs does not create files).
const swapPath = "/proc/escapeprobe-absent-swap"

// checkSwap: swapon and swapoff of a path that does not exist (ENOENT once
// past the capability check).
func checkSwap(*options) []attempt {
	p, _ := unix.BytePtrFromString(swapPath)
	_, _, e := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), 0, 0)
	atts := []attempt{filtered("swapon", errnoOf(e))}
	_, _, e = unix.Syscall(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(p)), 0, 0)
	runtime.KeepAlive(p)
	return append(atts, filtered("swapoff", errnoOf(e)))
}

// checkClock: clock_settime(CLOCK_REALTIME) and settimeofday with negative
// seconds and nanoseconds/microseconds, which the kernel rejects (EINVAL)
// before setting anything.
func checkClock(*options) []attempt {
	ts := unix.Timespec{Sec: -1, Nsec: -1}
	_, _, e := unix.Syscall(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&ts)), 0)
	atts := []attempt{filtered("clock_settime", errnoOf(e))}
	tv := unix.Timeval{Sec: -1, Usec: -1}
	_, _, e = unix.Syscall(unix.SYS_SETTIMEOFDAY, uintptr(unsafe.Pointer(&tv)), 0, 0)
	return append(atts, filtered("settimeofday", errnoOf(e)))
}

const (
	personalityQuery = 0xffffffff
	readImpliesExec  = 0x0400000
	addrNoRandomize  = 0x0040000
)

// checkPersonality: set READ_IMPLIES_EXEC, then ADDR_NO_RANDOMIZE, on a
// throwaway thread (personality is per thread), restoring the old value.
func checkPersonality(*options) []attempt {
	var atts []attempt
	for _, p := range []struct {
		name string
		bit  uintptr
	}{{"READ_IMPLIES_EXEC", readImpliesExec}, {"ADDR_NO_RANDOMIZE", addrNoRandomize}} {
		err := onThrowawayThread(func() error {
			old, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, personalityQuery, 0, 0)
			if e != 0 {
				old = 0 // PER_LINUX
			}
			old &= 0xffffffff
			if _, _, e = unix.RawSyscall(unix.SYS_PERSONALITY, old|p.bit, 0, 0); e != 0 {
				return e
			}
			unix.RawSyscall(unix.SYS_PERSONALITY, old, 0, 0)
			return nil
		})
		atts = append(atts, filtered(p.name, err))
	}
	return atts
}
