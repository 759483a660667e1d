package seccomp

import (
	"fmt"
	"sync"
)

// The seccomp ABI (linux/seccomp.h, linux/audit.h, linux/filter.h). They are
// spelled out here, not taken from golang.org/x/sys/unix, so that the filter
// can be built and unit-tested on any OS; a Linux test checks them against
// unix.
const (
	auditArchX86_64 = 0xc000003e // AUDIT_ARCH_X86_64
	auditArchI386   = 0x40000003 // AUDIT_ARCH_I386
	x32SyscallBit   = 0x40000000 // __X32_SYSCALL_BIT

	retKillProcess = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	retErrno       = 0x00050000 // SECCOMP_RET_ERRNO, errno in the low 16 bits
	retAllow       = 0x7fff0000 // SECCOMP_RET_ALLOW

	// Offsets in struct seccomp_data { int nr; __u32 arch; __u64
	// instruction_pointer; __u64 args[6]; }. args[i] is at offArgs+8*i, its
	// low 32 bits first (x86 is little-endian).
	offNr   = 0
	offArch = 4
	offArgs = 16
	dataLen = 64 // sizeof(struct seccomp_data)

	// Classic BPF opcodes the filter uses.
	opLdAbsW = 0x20 // BPF_LD | BPF_W | BPF_ABS: A = data[k:k+4]
	opJa     = 0x05 // BPF_JMP | BPF_JA: pc += k
	opJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K: pc += (A == k) ? jt : jf
	opJgtK   = 0x25 // BPF_JMP | BPF_JGT | BPF_K: pc += (A > k) ? jt : jf
	opJgeK   = 0x35 // BPF_JMP | BPF_JGE | BPF_K: pc += (A >= k) ? jt : jf
	opJsetK  = 0x45 // BPF_JMP | BPF_JSET | BPF_K: pc += (A & k) ? jt : jf
	opRetK   = 0x06 // BPF_RET | BPF_K: return k

	maxInstructions = 4096 // BPF_MAXINSNS
	maxJump         = 255  // jt and jf are 8 bits
)

// Values the argument checks compare with (x86 values of the uapi headers).
const (
	errEPERM        = 1
	errENOSYS       = 38
	errEAFNOSUPPORT = 97

	// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
	// CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME. clone()
	// reads CLONE_NEWTIME's bit (0x80) as part of the exit signal, which the
	// kernel rejects as invalid anyway, so denying it costs nothing.
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
	cloneNewTime   = 0x00000080
	cloneNewAny    = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC |
		cloneNewUser | cloneNewPID | cloneNewNet | cloneNewTime

	tiocsti   = 0x5412 // TIOCSTI: push a byte into a terminal's input
	tioclinux = 0x541c // TIOCLINUX: includes selection paste into a VT

	afUnspec = 0
	afALG    = 38 // AF_ALG: the kernel crypto API
	afVsock  = 40 // AF_VSOCK: host/guest sockets, not network-namespaced
	afMCTP   = 45 // AF_MCTP: the last family Docker's profile knows

	sysSocket = 1 // SYS_SOCKET, socketcall's socket() call
)

// personalities are the personality(2) arguments Docker allows: PER_LINUX,
// PER_LINUX32, UNAME26, UNAME26|PER_LINUX32, and 0xffffffff (query only).
var personalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// instruction is a classic BPF instruction, laid out as struct sock_filter.
type instruction struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// abi is one system call ABI the filter dispatches on by seccomp_data.arch.
type abi struct {
	name   string
	arch   uint32
	number func(sysEntry) int
}

// abis are the ABIs the filter knows, in dispatch order. Any other arch value
// kills the process. The x32 ABI arrives as AUDIT_ARCH_X86_64 with
// __X32_SYSCALL_BIT in nr and is denied as a whole.
var abis = []abi{
	{"x86_64", auditArchX86_64, func(e sysEntry) int { return e.amd64 }},
	{"i386", auditArchI386, func(e sysEntry) int { return e.i386 }},
}

// argRule is the check of one argument of one system call: the filter loads
// the argument's low 32 bits, returns onMatch if any test holds and otherwise
// otherwise.
//
// Only the low 32 bits are compared because every argument checked here is a
// 32-bit value in the kernel: ioctl's cmd and personality's persona are
// unsigned int, socket's family and socketcall's call are int, and clone
// keeps lower_32_bits(clone_flags). The kernel ignores the upper halves, so
// the filter must too: comparing all 64 bits would let a caller hide TIOCSTI
// behind a stray high bit. This also holds for the i386 ABI, where the upper
// halves are not zero when a 64-bit process uses INT $0x80 (seccomp_data
// carries the full registers) but the compat calls read only the low halves.
type argRule struct {
	arg       int // index in seccomp_data.args
	tests     []argTest
	onMatch   uint32
	otherwise uint32
}

type argTest struct {
	op uint16 // opJeqK, opJgtK or opJsetK
	k  uint32
}

func errno(e uint32) uint32 { return retErrno | e }

// ruleOf returns the argument check of an action, or false for actions that
// do not look at arguments.
func ruleOf(a action) (argRule, bool) {
	switch a {
	case checkClone:
		return argRule{arg: 0, tests: []argTest{{opJsetK, cloneNewAny}},
			onMatch: errno(errEPERM), otherwise: retAllow}, true
	case checkIoctl:
		return argRule{arg: 1, tests: []argTest{{opJeqK, tiocsti}, {opJeqK, tioclinux}},
			onMatch: errno(errEPERM), otherwise: retAllow}, true
	case checkPersonality:
		r := argRule{arg: 0, onMatch: retAllow, otherwise: errno(errEPERM)}
		for _, p := range personalities {
			r.tests = append(r.tests, argTest{opJeqK, p})
		}
		return r, true
	case checkSocket:
		return argRule{arg: 0, tests: []argTest{
			{opJeqK, afUnspec}, {opJeqK, afALG}, {opJeqK, afVsock}, {opJgtK, afMCTP},
		}, onMatch: errno(errEAFNOSUPPORT), otherwise: retAllow}, true
	case checkSocketcall:
		return argRule{arg: 0, tests: []argTest{{opJeqK, sysSocket}},
			onMatch: errno(errEPERM), otherwise: retAllow}, true
	}
	return argRule{}, false
}

// code emits the rule: load the argument, one jump per test to the onMatch
// return, the otherwise return, the onMatch return.
func (r argRule) code() []instruction {
	n := len(r.tests)
	out := make([]instruction, 0, n+3)
	out = append(out, instruction{code: opLdAbsW, k: uint32(offArgs + 8*r.arg)})
	for i, t := range r.tests {
		// Test i sits at index 1+i; the onMatch return at index n+2.
		out = append(out, instruction{code: t.op, jt: uint8(n - i), k: t.k})
	}
	return append(out, ret(r.otherwise), ret(r.onMatch))
}

func ret(k uint32) instruction { return instruction{code: opRetK, k: k} }

// leaf is the code that decides a system call known to have action a.
func leaf(a action) []instruction {
	switch a {
	case allow:
		return []instruction{ret(retAllow)}
	case deny:
		return []instruction{ret(errno(errEPERM))}
	case enosys:
		return []instruction{ret(errno(errENOSYS))}
	}
	r, ok := ruleOf(a)
	if !ok {
		panic(fmt.Sprintf("seccomp: action %d has no code", a))
	}
	return r.code()
}

// interval is a run of system call numbers [lo, next interval's lo) that
// share one action.
type interval struct {
	lo     uint32
	action action
}

// intervals maps every 32-bit number to an action for one ABI: the table's
// numbers get their row's action, every other number (gaps, calls newer than
// the table) enosys. Adjacent numbers with the same action share an interval.
func intervals(a abi) ([]interval, error) {
	byNr := make(map[int]sysEntry)
	highest := -1
	for _, e := range syscalls {
		nr := a.number(e)
		if nr < 0 {
			continue
		}
		if prev, dup := byNr[nr]; dup {
			return nil, fmt.Errorf("seccomp: %s number %d is both %s and %s", a.name, nr, prev.name, e.name)
		}
		byNr[nr] = e
		highest = max(highest, nr)
	}
	var out []interval
	add := func(nr int, act action) {
		if len(out) > 0 && out[len(out)-1].action == act {
			return
		}
		out = append(out, interval{lo: uint32(nr), action: act})
	}
	for nr := 0; nr <= highest; nr++ {
		act := enosys
		if e, ok := byNr[nr]; ok {
			act = e.action
		}
		add(nr, act)
	}
	add(highest+1, enosys)
	return out, nil
}

// tree emits a binary search over ivs on the number in A: at each node, one
// jge on the first number of the right half. Jumps are relative and forward
// only, so the code of a subtree can be placed anywhere. When the left half
// is longer than an 8-bit jump, the node jumps over it with a ja.
func tree(ivs []interval) []instruction {
	if len(ivs) == 1 {
		return leaf(ivs[0].action)
	}
	mid := len(ivs) / 2
	left, right := tree(ivs[:mid]), tree(ivs[mid:])
	k := ivs[mid].lo
	var out []instruction
	if len(left) <= maxJump {
		out = append(out, instruction{code: opJgeK, jt: uint8(len(left)), jf: 0, k: k})
	} else {
		out = append(out,
			instruction{code: opJgeK, jt: 0, jf: 1, k: k},
			instruction{code: opJa, k: uint32(len(left))})
	}
	out = append(out, left...)
	return append(out, right...)
}

// abiBlock is the filter for one ABI, entered with A undefined.
func abiBlock(a abi) ([]instruction, error) {
	ivs, err := intervals(a)
	if err != nil {
		return nil, err
	}
	out := []instruction{{code: opLdAbsW, k: offNr}}
	if a.arch == auditArchX86_64 {
		// x32 calls carry __X32_SYSCALL_BIT; numbers at or above it are
		// never x86_64 calls. Deny the whole range.
		out = append(out,
			instruction{code: opJgeK, jt: 0, jf: 1, k: x32SyscallBit},
			ret(errno(errEPERM)))
	}
	return append(out, tree(ivs)...), nil
}

// build assembles the whole program:
//
//	0: A = arch
//	1: if A == AUDIT_ARCH_X86_64 goto 5
//	2: if A == AUDIT_ARCH_I386 goto 4
//	3: return KILL_PROCESS
//	4: goto i386 block
//	5: x86_64 block
//	   i386 block
func build() ([]instruction, error) {
	x86, err := abiBlock(abis[0])
	if err != nil {
		return nil, err
	}
	i386, err := abiBlock(abis[1])
	if err != nil {
		return nil, err
	}
	prog := []instruction{
		{code: opLdAbsW, k: offArch},
		{code: opJeqK, jt: 3, jf: 0, k: abis[0].arch},
		{code: opJeqK, jt: 1, jf: 0, k: abis[1].arch},
		ret(retKillProcess),
		{code: opJa, k: uint32(len(x86))},
	}
	prog = append(prog, x86...)
	prog = append(prog, i386...)
	if len(prog) > maxInstructions {
		return nil, fmt.Errorf("seccomp: filter has %d instructions, the kernel takes at most %d", len(prog), maxInstructions)
	}
	return prog, nil
}

// program is the filter, built once.
var program = sync.OnceValues(build)

// Denied returns the names of the system calls the filter always denies on
// every ABI that has them, sorted: they fail with EPERM, or ENOSYS for
// clone3. Calls that are checked by argument (clone, ioctl, personality,
// socket, socketcall) are not in the list; doc.go describes them. Numbers
// that the filter's table does not know also fail (ENOSYS), and every x32
// call fails with EPERM.
func Denied() []string {
	var out []string
	for _, e := range syscalls {
		if e.action == deny || e.action == enosys {
			out = append(out, e.name)
		}
	}
	return out
}
