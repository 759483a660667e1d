package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// denyBPFEnv makes TestMain run cairn with bpf(2) failing (EPERM), as on a
// kernel or in a container where BPF is unavailable: the value is the
// binary's arguments, separated by the unit separator (0x1f).
const denyBPFEnv = "CAIRN_TEST_DENY_BPF_EXEC"

// execDenyingBPF installs a seccomp filter that fails bpf(2) with EPERM (on
// every thread, inherited across exec) and execs cairn with args. It is
// fault injection: the kernel's own BPF refuses as it would without
// CAP_BPF. It returns only on failure.
func execDenyingBPF(args []string) error {
	runtime.LockOSThread()
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("the BPF-denying filter is written for amd64, not %s", runtime.GOARCH)
	}
	const (
		offNR   = 0 // struct seccomp_data: nr, arch, ...
		offArch = 4
	)
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offArch},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, Jf: 0, K: unix.AUDIT_ARCH_X86_64},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offNR},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_BPF},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	return syscall.Exec(args[0], args, os.Environ())
}

// TestRun_EgressRefusedWithoutBPF: a policy that cannot be enforced is a
// refusal, never an open network. With bpf(2) failing for cairn run, a
// run with egress rules exits 125 naming the cause and runs nothing,
// while the same sandbox without a policy (--net none) still runs.
func TestRun_EgressRefusedWithoutBPF(t *testing.T) {
	in := newInstance(t)
	dir := in.mount("ws")
	// The test binary re-executes itself (TestMain) to install the
	// filter, then becomes cairn.
	run := func(args ...string) result {
		t.Helper()
		argv := append([]string{cairnBin}, args...)
		return runBinary(t, append(in.env(), denyBPFEnv+"="+strings.Join(argv, "\x1f")), os.Args[0])
	}
	if r := run("run", "ws", "--no-snapshot", "--", "touch", "/workspace/none"); r.code != 0 {
		t.Fatalf("--net none with bpf(2) denied: exit %d, want 0 (it needs no BPF)\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); err != nil {
		t.Errorf("--net none did not run: %v", err)
	}
	for _, args := range [][]string{
		{"--allow", "127.0.0.1:80"},
		{"--net", "unrestricted"}, // audited: needs the programs too
	} {
		argv := append(append([]string{"run", "ws", "--no-snapshot"}, args...), "--", "touch", "/workspace/ran")
		r := run(argv...)
		if r.code != 125 {
			t.Errorf("cairn %s with bpf(2) denied: exit %d, want 125\nstderr: %s", strings.Join(argv, " "), r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, "BPF") && !strings.Contains(r.stderr, "bpf") {
			t.Errorf("cairn %s: the error does not say BPF is the cause:\n%s", strings.Join(argv, " "), r.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Fatalf("cairn %s ran the command without its egress policy", strings.Join(argv, " "))
		}
	}
	in.noStrays()
}
