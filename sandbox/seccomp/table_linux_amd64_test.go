package seccomp

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestConstants_MatchUnix checks the constants filter.go spells out against
// golang.org/x/sys/unix.
func TestConstants_MatchUnix(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"AUDIT_ARCH_X86_64", auditArchX86_64, unix.AUDIT_ARCH_X86_64},
		{"AUDIT_ARCH_I386", auditArchI386, unix.AUDIT_ARCH_I386},
		{"SECCOMP_RET_KILL_PROCESS", retKillProcess, unix.SECCOMP_RET_KILL_PROCESS},
		{"SECCOMP_RET_ERRNO", retErrno, unix.SECCOMP_RET_ERRNO},
		{"SECCOMP_RET_ALLOW", retAllow, unix.SECCOMP_RET_ALLOW},
		{"EPERM", errEPERM, uint64(unix.EPERM)},
		{"ENOSYS", errENOSYS, uint64(unix.ENOSYS)},
		{"EAFNOSUPPORT", errEAFNOSUPPORT, uint64(unix.EAFNOSUPPORT)},
		{"CLONE_NEWNS", cloneNewNS, unix.CLONE_NEWNS},
		{"CLONE_NEWCGROUP", cloneNewCgroup, unix.CLONE_NEWCGROUP},
		{"CLONE_NEWUTS", cloneNewUTS, unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", cloneNewIPC, unix.CLONE_NEWIPC},
		{"CLONE_NEWUSER", cloneNewUser, unix.CLONE_NEWUSER},
		{"CLONE_NEWPID", cloneNewPID, unix.CLONE_NEWPID},
		{"CLONE_NEWNET", cloneNewNet, unix.CLONE_NEWNET},
		{"CLONE_NEWTIME", cloneNewTime, unix.CLONE_NEWTIME},
		{"TIOCSTI", tiocsti, unix.TIOCSTI},
		{"TIOCLINUX", tioclinux, unix.TIOCLINUX},
		{"AF_UNSPEC", afUnspec, unix.AF_UNSPEC},
		{"AF_ALG", afALG, unix.AF_ALG},
		{"AF_VSOCK", afVsock, unix.AF_VSOCK},
		{"AF_MCTP", afMCTP, unix.AF_MCTP},
		{"SYS_SOCKET (socketcall)", sysSocket, 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, unix says %#x", c.name, c.got, c.want)
		}
	}
}

// TestTable_SyscallNumbers checks a few x86_64 numbers of the table against
// the unix.SYS_* constants compiled into this test.
func TestTable_SyscallNumbers(t *testing.T) {
	for name, want := range map[string]int{
		"read": unix.SYS_READ, "mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2,
		"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS, "bpf": unix.SYS_BPF,
		"ptrace": unix.SYS_PTRACE, "clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3,
		"ioctl": unix.SYS_IOCTL, "personality": unix.SYS_PERSONALITY, "socket": unix.SYS_SOCKET,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "perf_event_open": unix.SYS_PERF_EVENT_OPEN,
		"keyctl": unix.SYS_KEYCTL, "getpid": unix.SYS_GETPID, "execve": unix.SYS_EXECVE,
		"futex": unix.SYS_FUTEX, "newfstatat": unix.SYS_NEWFSTATAT, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
		"userfaultfd": unix.SYS_USERFAULTFD, "landlock_restrict_self": unix.SYS_LANDLOCK_RESTRICT_SELF,
		"mseal": unix.SYS_MSEAL, "listns": unix.SYS_LISTNS,
	} {
		if got := int(numberOf(t, name, archX86_64)); got != want {
			t.Errorf("%s: table says %d, unix.SYS_ says %d", name, got, want)
		}
	}
}

// TestTable_MatchesXSys compares every number of the table, on both ABIs,
// with golang.org/x/sys/unix's generated zsysnum files for linux/amd64 and
// linux/386 (read from the module's source, since the 386 constants cannot
// be compiled into an amd64 test), and checks that the table names every
// call those files know.
func TestTable_MatchesXSys(t *testing.T) {
	dir := xsysDir(t)
	for _, f := range []struct {
		file string
		nr   func(sysEntry) int
	}{
		{"zsysnum_linux_amd64.go", func(e sysEntry) int { return e.amd64 }},
		{"zsysnum_linux_386.go", func(e sysEntry) int { return e.i386 }},
	} {
		want := parseSysnum(t, filepath.Join(dir, "unix", f.file))
		got := map[string]int{}
		for _, e := range syscalls {
			if n := f.nr(e); n >= 0 {
				got[e.name] = n
			}
		}
		for name, n := range want {
			if g, ok := got[name]; !ok {
				t.Errorf("%s: %s (%d) is missing from the table", f.file, name, n)
			} else if g != n {
				t.Errorf("%s: %s is %d, the table says %d", f.file, name, n, g)
			}
		}
		for name, n := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("%s: the table has %s = %d, x/sys does not", f.file, name, n)
			}
		}
	}
}

// xsysDir finds the source of the golang.org/x/sys module this test is built
// with.
func xsysDir(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		skipOrFail(t, "needs the go command and the golang.org/x/sys module source (go list -m: %v)", err)
	}
	return dir
}

var sysnumLine = regexp.MustCompile(`^\s*SYS_(\w+)\s*=\s*(\d+)`)

func parseSysnum(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := sysnumLine.FindStringSubmatch(s.Text()); m != nil {
			n, err := strconv.Atoi(m[2])
			if err != nil {
				t.Fatal(err)
			}
			out[strings.ToLower(m[1])] = n
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 300 {
		t.Fatalf("%s: only %d system calls parsed", path, len(out))
	}
	return out
}

// skipOrFail skips the test for a missing prerequisite, except in CI
// (CI=true), where a skip would hide the test: there it fails.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (CI=true: not skipping)", args...)
	}
	t.Skipf(format, args...)
}
