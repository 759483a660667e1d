//go:build linux

package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawCall is one syscall made through another ABI, with arguments chosen so
// that the kernel rejects it harmlessly once the call reaches its body:
// NULL pointers (EFAULT), fd -1 (EBADF), invalid flags, magic numbers or
// clock ids (EINVAL), or a pid that cannot exist (ESRCH). Pointers could
// not be passed anyway: the i386 ABI truncates them to 32 bits.
type rawCall struct {
	name string
	nr   uintptr
	args [5]uintptr
}

const (
	i386Neg1      = 0xffffffff // -1 as a 32-bit argument
	ptraceAttach  = 16
	absentPid     = 0x7ffffff0 // above PID_MAX_LIMIT
	cloneNewUser  = unix.CLONE_NEWUSER
	cloneFS       = unix.CLONE_FS
	i386CloneNr   = 120
	invalidClock  = 100 // above MAX_CLOCKS
	i386ExitGroup = 252
)

// i386Calls are made with `int $0x80` (AUDIT_ARCH_I386). Numbers from the
// kernel's arch/x86/entry/syscalls/syscall_32.tbl.
var i386Calls = []rawCall{
	{"mount", 21, [5]uintptr{}},
	{"umount2", 52, [5]uintptr{}},
	{"unshare", 310, [5]uintptr{cloneNewUser}}, // EINVAL: the probe is threaded
	{"setns", 346, [5]uintptr{i386Neg1}},
	{"clone", i386CloneNr, [5]uintptr{cloneNewUser | cloneFS}}, // EINVAL: NEWUSER with FS
	{"bpf", 357, [5]uintptr{}},
	{"ptrace", 26, [5]uintptr{ptraceAttach, absentPid}},
	{"process_vm_readv", 347, [5]uintptr{1, 0, 1, 0, 1}},
	{"process_vm_writev", 348, [5]uintptr{1, 0, 1, 0, 1}},
	{"io_uring_setup", 425, [5]uintptr{1}},
	{"io_uring_enter", 426, [5]uintptr{i386Neg1}},
	{"perf_event_open", 336, [5]uintptr{0, 0, i386Neg1, i386Neg1}},
	{"keyctl", 288, [5]uintptr{0x7fffffff}},
	{"add_key", 286, [5]uintptr{}},
	{"request_key", 287, [5]uintptr{}},
	{"reboot", 88, [5]uintptr{}},
	{"personality", 136, [5]uintptr{readImpliesExec}}, // changes only the child
	{"userfaultfd", 374, [5]uintptr{i386Neg1}},
	{"kexec_load", 283, [5]uintptr{0, 0xffff, 0, 0x8000}},
	{"init_module", 128, [5]uintptr{}},
	{"finit_module", 350, [5]uintptr{i386Neg1}},
	{"delete_module", 129, [5]uintptr{}},
	{"chroot", 61, [5]uintptr{}},
	{"pivot_root", 217, [5]uintptr{}},
	{"open_by_handle_at", 342, [5]uintptr{i386Neg1}},
	{"swapon", 87, [5]uintptr{}},
	{"swapoff", 115, [5]uintptr{}},
	{"clock_settime", 264, [5]uintptr{invalidClock}},
	{"settimeofday", 79, [5]uintptr{}}, // NULL, NULL: sets nothing
	{"fsopen", 430, [5]uintptr{}},
	{"open_tree", 428, [5]uintptr{i386Neg1, 0, i386Neg1}},
	{"move_mount", 429, [5]uintptr{i386Neg1, 0, i386Neg1, 0, i386Neg1}},
	{"mount_setattr", 442, [5]uintptr{i386Neg1, 0, i386Neg1}},
}

// x32Bit marks a syscall number as the x32 ABI.
const x32Bit = 0x40000000

// x32Calls are made with the syscall instruction and x32Bit set. The
// numbers are the x86_64 "common" ones.
var x32Calls = []rawCall{
	{"getpid", 39, [5]uintptr{}},
	{"mount", 165, [5]uintptr{}},
	{"unshare", 272, [5]uintptr{cloneNewUser}},
}

func findRaw(table []rawCall, name string) (rawCall, bool) {
	for _, c := range table {
		if c.name == name {
			return c, true
		}
	}
	return rawCall{}, false
}

// helperRaw makes one call (in a child of the probe: a filter may kill
// the process) and prints "ret=N", N negative for an errno.
func helperRaw(i386 bool, name string, w, stderr io.Writer) int {
	table := x32Calls
	if i386 {
		table = i386Calls
	}
	c, ok := findRaw(table, name)
	if !ok {
		fmt.Fprintf(stderr, "escapeprobe: unknown raw call %q\n", name)
		return exitError
	}
	var ret int64
	if i386 {
		r, err := int80Call(c)
		if err != nil {
			fmt.Fprintf(w, "error=%v\n", err)
			return exitError
		}
		ret = int64(int32(uint32(r))) // the i386 ABI returns 32 bits
	} else {
		a := c.args
		r, _, e := syscall.RawSyscall6(c.nr|x32Bit, a[0], a[1], a[2], a[3], a[4], 0)
		ret = int64(r)
		if e != 0 {
			ret = -int64(e)
		}
	}
	fmt.Fprintf(w, "ret=%d\n", ret)
	return 0
}

// rawAttempt runs one raw call in a child and classifies it like filtered.
func rawAttempt(kind string, c rawCall) attempt {
	m, failed := childOutcome(c.name, self(kind, c.name))
	if failed != nil {
		return *failed
	}
	if e, ok := m["error"]; ok {
		return attempt{c.name, Errored, e}
	}
	ret, err := strconv.ParseInt(m["ret"], 10, 64)
	if err != nil {
		return attempt{c.name, Errored, "bad-child-output"}
	}
	if ret < 0 && ret >= -4095 {
		return filtered(c.name, syscall.Errno(-ret))
	}
	return attempt{c.name, Escaped, "ok(ret=" + strconv.FormatInt(ret, 10) + ")"}
}

// checkInt80: the blocked calls through the i386 ABI (int $0x80).
func checkInt80(*options) []attempt {
	atts := make([]attempt, 0, len(i386Calls))
	for _, c := range i386Calls {
		atts = append(atts, rawAttempt("_int80", c))
	}
	return atts
}

// checkX32: calls through the x32 ABI. A kernel built without
// CONFIG_X86_X32_ABI answers ENOSYS whatever the filter does, which is
// reported BLOCKED with a note when /proc/config.gz says so.
func checkX32(*options) []attempt {
	if runtime.GOARCH != "amd64" {
		return []attempt{{"x32", Errored, "needs-linux/amd64"}}
	}
	note := ""
	if x32Missing() {
		note = "(kernel-without-x32-ABI)"
	}
	atts := make([]attempt, 0, len(x32Calls))
	for _, c := range x32Calls {
		a := rawAttempt("_x32", c)
		if a.Detail == "ENOSYS" {
			a.Detail += note
		}
		atts = append(atts, a)
	}
	return atts
}

// x32Missing reports whether /proc/config.gz says the kernel has no x32 ABI.
func x32Missing() bool {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return false
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(zr, 4<<20))
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "# CONFIG_X86_X32_ABI is not set")
}
