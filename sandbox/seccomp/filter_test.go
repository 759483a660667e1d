package seccomp

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Verdicts as the kernel sees them; written out here rather than derived
// from filter.go, so that the test is an independent statement of the policy.
const (
	vAllow       = 0x7fff0000
	vKill        = 0x80000000
	vEPERM       = 0x00050000 | 1
	vENOSYS      = 0x00050000 | 38
	vEAFNOSUPORT = 0x00050000 | 97

	archX86_64  = 0xc000003e
	archI386    = 0x40000003
	archAArch64 = 0xc00000b7
	archX32Bit  = 0x40000000
)

func mustProgram(t testing.TB) []instruction {
	t.Helper()
	prog, err := program()
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(prog); err != nil {
		t.Fatalf("invalid program: %v", err)
	}
	return prog
}

func eval(t testing.TB, prog []instruction, d seccompData) uint32 {
	t.Helper()
	v, _, err := run(prog, d)
	if err != nil {
		t.Fatalf("run %+v: %v", d, err)
	}
	return v
}

// numberOf returns a call's number on an ABI from the table.
func numberOf(t testing.TB, name string, arch uint32) uint32 {
	t.Helper()
	for _, e := range syscalls {
		if e.name != name {
			continue
		}
		nr := e.amd64
		if arch == archI386 {
			nr = e.i386
		}
		if nr < 0 {
			t.Fatalf("%s has no number for arch %#x", name, arch)
		}
		return uint32(nr)
	}
	t.Fatalf("%s is not in the table", name)
	return 0
}

// rowsByNumber indexes the table by ABI and number.
var rowsByNumber = sync.OnceValue(func() map[uint32]map[uint32]sysEntry {
	m := map[uint32]map[uint32]sysEntry{archX86_64: {}, archI386: {}}
	for _, e := range syscalls {
		if e.amd64 >= 0 {
			m[archX86_64][uint32(e.amd64)] = e
		}
		if e.i386 >= 0 {
			m[archI386][uint32(e.i386)] = e
		}
	}
	return m
})

// reference is the policy stated independently of the filter's code: what
// the verdict must be for a call, computed from the table's rows and the
// kernel's reading of the arguments (their low 32 bits).
func reference(arch, nr uint32, args [6]uint64) uint32 {
	switch arch {
	case archX86_64:
		if nr >= archX32Bit {
			return vEPERM
		}
	case archI386:
	default:
		return vKill
	}
	row, ok := rowsByNumber()[arch][nr]
	if !ok {
		return vENOSYS
	}
	lo0, lo1 := uint32(args[0]), uint32(args[1])
	switch row.action {
	case allow:
		return vAllow
	case deny:
		return vEPERM
	case enosys:
		return vENOSYS
	case checkClone:
		for _, f := range []uint32{0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000, 0x80} {
			if lo0&f != 0 {
				return vEPERM
			}
		}
		return vAllow
	case checkIoctl:
		if lo1 == 0x5412 || lo1 == 0x541c {
			return vEPERM
		}
		return vAllow
	case checkPersonality:
		if slices.Contains([]uint32{0, 8, 0x20000, 0x20008, 0xffffffff}, lo0) {
			return vAllow
		}
		return vEPERM
	case checkSocket:
		if lo0 == 0 || lo0 == 38 || lo0 == 40 || lo0 > 45 {
			return vEAFNOSUPORT
		}
		return vAllow
	case checkSocketcall:
		if lo0 == 1 {
			return vEPERM
		}
		return vAllow
	}
	panic(fmt.Sprintf("action %d", row.action))
}

// interestingArgs are argument vectors that exercise every argument check:
// the values the checks compare with, their neighbours, and each of them
// with garbage in the upper 32 bits or only in the upper 32 bits.
func interestingArgs() [][6]uint64 {
	vals := []uint64{
		0, 1, 2, 8, 16, 0x80, 0x100, 0x11, 0x10000, 0x20000, 0x20008, 0x40000, 0x400000,
		0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000, 0x7e020080,
		0x5401, 0x5412, 0x541c, 0x5413, 38, 40, 44, 45, 46, 0xffff, 0xfffffffe, 0xffffffff,
	}
	var out [][6]uint64
	for _, v := range vals {
		for _, w := range []uint64{v, v | 0xdeadbeef00000000, v << 32, v | 1<<32} {
			out = append(out, [6]uint64{w}, [6]uint64{0, w}, [6]uint64{w, w, w, w, w, w})
		}
	}
	return out
}

func TestFilter_Program(t *testing.T) {
	prog := mustProgram(t)
	t.Logf("%d instructions", len(prog))
	// The longest path must stay short: a binary search, not a list.
	longest := 0
	for _, arch := range []uint32{archX86_64, archI386} {
		for nr := range uint32(600) {
			_, steps, err := run(prog, seccompData{nr: nr, arch: arch, args: [6]uint64{0, 0x5401}})
			if err != nil {
				t.Fatal(err)
			}
			longest = max(longest, steps)
		}
	}
	t.Logf("longest path: %d instructions", longest)
	if longest > 30 {
		t.Errorf("a call runs %d instructions of the filter; want a binary search (< 30)", longest)
	}
}

func TestFilter_ArchDispatch(t *testing.T) {
	prog := mustProgram(t)
	cases := []struct {
		name string
		d    seccompData
		want uint32
	}{
		{"x86_64 getpid", seccompData{nr: 39, arch: archX86_64}, vAllow},
		{"x86_64 mount", seccompData{nr: 165, arch: archX86_64}, vEPERM},
		{"i386 getpid", seccompData{nr: 20, arch: archI386}, vAllow},
		{"i386 mount", seccompData{nr: 21, arch: archI386}, vEPERM},
		// i386 number 39 is mkdir, x86_64 number 21 is access: the same
		// number means different calls, so each ABI needs its own table.
		{"i386 mkdir", seccompData{nr: 39, arch: archI386}, vAllow},
		{"i386 165 (getresuid)", seccompData{nr: 165, arch: archI386}, vAllow},
		{"i386 unshare", seccompData{nr: 310, arch: archI386}, vEPERM},
		{"x86_64 310 (process_vm_readv)", seccompData{nr: 310, arch: archX86_64}, vEPERM},
		{"aarch64 getpid", seccompData{nr: 172, arch: archAArch64}, vKill},
		{"arch 0", seccompData{nr: 39, arch: 0}, vKill},
		{"x86_64 with the i386 bit pattern flipped", seccompData{nr: 39, arch: archX86_64 &^ 0x80000000}, vKill},
		{"x32 getpid", seccompData{nr: archX32Bit | 39, arch: archX86_64}, vEPERM},
		{"x32 read (number 0)", seccompData{nr: archX32Bit, arch: archX86_64}, vEPERM},
		{"x32 execve (x32 number 520)", seccompData{nr: archX32Bit | 520, arch: archX86_64}, vEPERM},
		{"x86_64 nr -1", seccompData{nr: 0xffffffff, arch: archX86_64}, vEPERM},
		{"x86_64 nr 0x3fffffff", seccompData{nr: 0x3fffffff, arch: archX86_64}, vENOSYS},
		{"i386 with the x32 bit", seccompData{nr: archX32Bit | 20, arch: archI386}, vENOSYS},
		{"x86_64 unknown 1000", seccompData{nr: 1000, arch: archX86_64}, vENOSYS},
		{"x86_64 gap 400", seccompData{nr: 400, arch: archX86_64}, vENOSYS},
		{"i386 unknown 1000", seccompData{nr: 1000, arch: archI386}, vENOSYS},
		{"x86_64 clone3", seccompData{nr: 435, arch: archX86_64}, vENOSYS},
		{"i386 clone3", seccompData{nr: 435, arch: archI386}, vENOSYS},
	}
	for _, c := range cases {
		if got := eval(t, prog, c.d); got != c.want {
			t.Errorf("%s: verdict %#x, want %#x", c.name, got, c.want)
		}
	}
}

func TestFilter_Arguments(t *testing.T) {
	prog := mustProgram(t)
	const hi = 0xdeadbeef00000000
	type call struct {
		name string
		args [6]uint64
		want uint32
	}
	cases := []call{
		{"clone", [6]uint64{0x11 /* SIGCHLD */}, vAllow},
		{"clone", [6]uint64{0x3d0f00 /* Go runtime thread flags */}, vAllow},
		{"clone", [6]uint64{0x4111 /* CLONE_VM|CLONE_VFORK|SIGCHLD */}, vAllow},
		{"clone", [6]uint64{0x20000 | 0x11}, vEPERM},
		{"clone", [6]uint64{0x10000000}, vEPERM},
		{"clone", [6]uint64{0x40000000}, vEPERM},
		{"clone", [6]uint64{0x80}, vEPERM},
		{"clone", [6]uint64{hi | 0x20000}, vEPERM},
		{"clone", [6]uint64{0x20000 << 32}, vAllow},                // the kernel ignores the upper half
		{"clone", [6]uint64{0, 0x20000, 0x20000, 0x20000}, vAllow}, // only arg 0 is the flags
		{"ioctl", [6]uint64{1, 0x5412}, vEPERM},
		{"ioctl", [6]uint64{1, 0x541c}, vEPERM},
		{"ioctl", [6]uint64{1, hi | 0x5412}, vEPERM},
		{"ioctl", [6]uint64{1, 1<<32 | 0x5412}, vEPERM},
		{"ioctl", [6]uint64{1, 0x5401}, vAllow},
		{"ioctl", [6]uint64{1, 0x5412 << 32}, vAllow},
		{"ioctl", [6]uint64{0x5412, 0x5401}, vAllow},
		{"personality", [6]uint64{0}, vAllow},
		{"personality", [6]uint64{0xffffffff}, vAllow},
		{"personality", [6]uint64{0x20008}, vAllow},
		{"personality", [6]uint64{0x400000}, vEPERM},
		{"personality", [6]uint64{0x40000}, vEPERM},
		{"personality", [6]uint64{hi | 0x400000}, vEPERM},
		{"personality", [6]uint64{0x1_00000000}, vAllow}, // the kernel reads 0
		{"socket", [6]uint64{1}, vAllow},
		{"socket", [6]uint64{2}, vAllow},
		{"socket", [6]uint64{10}, vAllow},
		{"socket", [6]uint64{16 /* AF_NETLINK */}, vAllow},
		{"socket", [6]uint64{17 /* AF_PACKET */}, vAllow},
		{"socket", [6]uint64{45}, vAllow},
		{"socket", [6]uint64{0}, vEAFNOSUPORT},
		{"socket", [6]uint64{38}, vEAFNOSUPORT},
		{"socket", [6]uint64{40}, vEAFNOSUPORT},
		{"socket", [6]uint64{46}, vEAFNOSUPORT},
		{"socket", [6]uint64{hi | 40}, vEAFNOSUPORT},
		{"socket", [6]uint64{1<<32 | 40}, vEAFNOSUPORT},
		{"socket", [6]uint64{40 << 32}, vEAFNOSUPORT}, // the kernel reads family 0
	}
	for _, arch := range []uint32{archX86_64, archI386} {
		all := cases
		if arch == archI386 {
			all = append(slices.Clone(cases),
				call{"socketcall", [6]uint64{1}, vEPERM},
				call{"socketcall", [6]uint64{hi | 1}, vEPERM},
				call{"socketcall", [6]uint64{2}, vAllow},
				call{"socketcall", [6]uint64{8}, vAllow},
				call{"socketcall", [6]uint64{1 << 32}, vAllow},
			)
		}
		for _, c := range all {
			d := seccompData{nr: numberOf(t, c.name, arch), arch: arch, args: c.args}
			if got := eval(t, prog, d); got != c.want {
				t.Errorf("arch %#x %s(%#x): verdict %#x, want %#x", arch, c.name, c.args, got, c.want)
			}
		}
	}
}

// TestFilter_MatchesReference runs every number of both ABIs, and numbers
// around every boundary, with many argument vectors through the filter and
// compares with the reference policy.
func TestFilter_MatchesReference(t *testing.T) {
	prog := mustProgram(t)
	nrs := []uint32{0x3fffffff, 0x40000000, 0x40000001, 0x40000027, 0x400001ff, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff}
	for nr := range uint32(1100) {
		nrs = append(nrs, nr)
	}
	argSets := interestingArgs()
	checked := 0
	for _, arch := range []uint32{archX86_64, archI386, archAArch64, 0xc000003f} {
		for _, nr := range nrs {
			for _, args := range argSets {
				d := seccompData{nr: nr, arch: arch, args: args, ip: 0x401000}
				got, want := eval(t, prog, d), reference(arch, nr, args)
				if got != want {
					t.Fatalf("arch %#x nr %d args %#x: verdict %#x, want %#x", arch, nr, args, got, want)
				}
				checked++
			}
		}
	}
	t.Logf("%d evaluations agree with the reference", checked)
}

// TestTree_LongBranches builds a search tree whose left halves are longer
// than an 8-bit jump, so that the ja trampolines are exercised.
func TestTree_LongBranches(t *testing.T) {
	var ivs []interval
	for i := range 1200 {
		// Alternate allow and an argument check (9 instructions) so that no
		// two neighbours merge and subtrees grow past 255 instructions.
		act := allow
		if i%2 == 1 {
			act = checkPersonality
		}
		ivs = append(ivs, interval{lo: uint32(3 * i), action: act})
	}
	prog := append(tree(ivs), ret(retKillProcess))
	prog = append([]instruction{{code: opLdAbsW, k: offNr}}, prog...)
	if len(prog) <= maxJump*2 {
		t.Fatalf("tree of %d instructions is too short to need trampolines", len(prog))
	}
	trampolines := 0
	for _, in := range prog {
		if in.code == opJa {
			trampolines++
		}
	}
	if trampolines == 0 {
		t.Fatal("no ja trampoline emitted")
	}
	if len(prog) > maxInstructions {
		// validate would refuse it; interpret it anyway.
		t.Logf("%d instructions (over the kernel limit, fine for this test)", len(prog))
	}
	for nr := range uint32(3 * 1200) {
		v, _, err := run(prog, seccompData{nr: nr, args: [6]uint64{0x400000}})
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(vAllow)
		if (nr/3)%2 == 1 {
			want = vEPERM
		}
		if v != want {
			t.Fatalf("nr %d: verdict %#x, want %#x", nr, v, want)
		}
	}
}

func TestTable_Consistent(t *testing.T) {
	if !sort.SliceIsSorted(syscalls, func(i, j int) bool { return syscalls[i].name < syscalls[j].name }) {
		t.Error("table is not sorted by name")
	}
	seen := map[string]bool{}
	nrs := map[uint32]map[int]string{archX86_64: {}, archI386: {}}
	for _, e := range syscalls {
		if seen[e.name] {
			t.Errorf("%s listed twice", e.name)
		}
		seen[e.name] = true
		if e.amd64 < 0 && e.i386 < 0 {
			t.Errorf("%s has no number", e.name)
		}
		for arch, nr := range map[uint32]int{archX86_64: e.amd64, archI386: e.i386} {
			if nr < 0 {
				continue
			}
			if other, dup := nrs[arch][nr]; dup {
				t.Errorf("arch %#x number %d is %s and %s", arch, nr, other, e.name)
			}
			nrs[arch][nr] = e.name
		}
	}
}

// policy of the brief and of Docker's profile, stated by name.
var (
	mustDeny = []string{
		"mount", "umount2", "umount", "mount_setattr", "open_tree", "move_mount", "fsopen", "fsconfig",
		"fsmount", "fspick", "pivot_root", "chroot", "unshare", "setns", "bpf", "perf_event_open",
		"io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace", "process_vm_readv",
		"process_vm_writev", "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load",
		"init_module", "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at",
		"userfaultfd", "reboot", "swapon", "swapoff", "settimeofday", "clock_settime", "clock_settime64",
		"clock_adjtime", "clock_adjtime64", "adjtimex", "stime", "acct", "quotactl", "quotactl_fd",
		"lookup_dcookie", "nfsservctl", "vhangup", "syslog", "iopl", "ioperm", "fanotify_init",
		"pidfd_getfd", "kcmp", "mbind", "set_mempolicy", "get_mempolicy", "sethostname",
		"setdomainname", "listns", "open_tree_attr", "process_madvise", "vm86", "vm86old",
	}
	// mustAllow: what the Go runtime, glibc and common tools need.
	mustAllow = []string{
		"read", "write", "openat", "close", "mmap", "munmap", "mprotect", "madvise", "brk", "futex",
		"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "tgkill", "gettid", "getpid",
		"sched_yield", "sched_getaffinity", "nanosleep", "clock_gettime", "clock_nanosleep",
		"epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "eventfd2", "pipe2", "fcntl",
		"getrandom", "execve", "execveat", "wait4", "waitid", "exit_group", "exit", "pidfd_open",
		"pidfd_send_signal", "prlimit64", "arch_prctl", "set_tid_address", "set_robust_list",
		"rseq", "newfstatat", "statx", "getdents64", "readlinkat", "faccessat2", "fchmodat2",
		"timer_create", "timer_settime", "setitimer", "prctl", "seccomp", "landlock_create_ruleset",
		"landlock_add_rule", "landlock_restrict_self", "memfd_create", "copy_file_range",
		"sendfile", "splice", "bind", "listen", "accept4", "connect", "sendmsg", "recvmsg",
		"sendto", "recvfrom", "setsockopt", "getsockopt", "socketpair", "shutdown", "vfork", "fork",
		"mknodat", "umask", "uname", "sysinfo", "close_range", "openat2", "fallocate", "ftruncate",
		"i386-only:mmap2", "i386-only:_llseek", "i386-only:fcntl64", "i386-only:stat64",
		"i386-only:sigreturn", "i386-only:clock_gettime64", "i386-only:futex_time64",
	}
)

func TestTable_Policy(t *testing.T) {
	byName := map[string]sysEntry{}
	for _, e := range syscalls {
		byName[e.name] = e
	}
	for _, n := range mustDeny {
		e, ok := byName[n]
		if !ok {
			t.Errorf("%s: not in the table", n)
		} else if e.action != deny {
			t.Errorf("%s: action %d, want deny", n, e.action)
		}
	}
	for _, n := range mustAllow {
		name, i386Only := n, false
		if after, ok := strings.CutPrefix(n, "i386-only:"); ok {
			name, i386Only = after, true
		}
		e, ok := byName[name]
		switch {
		case !ok:
			t.Errorf("%s: not in the table", name)
		case e.action != allow:
			t.Errorf("%s: action %d, want allow", name, e.action)
		case i386Only && (e.i386 < 0 || e.amd64 >= 0):
			t.Errorf("%s: numbers %d/%d, want an i386-only call", name, e.amd64, e.i386)
		}
	}
	for name, want := range map[string]action{
		"clone": checkClone, "clone3": enosys, "ioctl": checkIoctl, "personality": checkPersonality,
		"socket": checkSocket, "socketcall": checkSocketcall,
	} {
		if got := byName[name].action; got != want {
			t.Errorf("%s: action %d, want %d", name, got, want)
		}
	}
}

func TestDenied(t *testing.T) {
	got := Denied()
	if !sort.StringsAreSorted(got) {
		t.Error("Denied() is not sorted")
	}
	for _, n := range append(slices.Clone(mustDeny), "clone3") {
		if !slices.Contains(got, n) {
			t.Errorf("Denied() lacks %s", n)
		}
	}
	for _, n := range []string{"clone", "ioctl", "personality", "socket", "read", "execve"} {
		if slices.Contains(got, n) {
			t.Errorf("Denied() lists %s", n)
		}
	}
}
