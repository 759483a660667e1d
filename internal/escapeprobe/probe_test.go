//go:build linux

package main

import (
	"bytes"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cairnfs/cairn/internal/testenv"
	"golang.org/x/sys/unix"
)

// The tests run the probe on the host, unconfined, as root, where the
// escapes must be DETECTED, and as nobody, where the kernel's own checks
// must be reported BLOCKED. The probe never runs directly under the test:
// the test binary re-executes itself as a tiny init (see testInit) in a new
// mount namespace with private propagation, so that mounts that "escape"
// stay there, and (for most runs) a new pid namespace with a fresh /proc,
// so that pid 1 and the parent the probe pokes at are that init.

// Environment of the test's init.
const (
	envInit  = "ESCAPEPROBE_TEST_INIT"  // "1": run testInit
	envProc  = "ESCAPEPROBE_TEST_PROC"  // "1": mount a fresh /proc
	envUID   = "ESCAPEPROBE_TEST_UID"   // run the probe as this uid and gid
	envStrip = "ESCAPEPROBE_TEST_STRIP" // a variable init keeps but the probe does not get
	envABI   = "ESCAPEPROBE_TEST_ABI"   // "errno" or "kill": deny the i386 and x32 ABIs
)

func TestMain(m *testing.M) {
	if os.Getenv(envInit) == "1" {
		os.Exit(testInit())
	}
	os.Exit(m.Run())
}

// testInit makes / private in its new mount namespace, mounts /proc if
// asked, runs os.Args[1:] (the probe) and exits with its status.
func testInit() int {
	fail := func(what string, err error) int {
		os.Stderr.WriteString("escapeprobe test init: " + what + ": " + err.Error() + "\n")
		return 125
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("make / private", err)
	}
	if os.Getenv(envProc) == "1" {
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fail("mount /proc", err)
		}
	}
	if mode := os.Getenv(envABI); mode != "" {
		if err := denyOtherABIs(mode == "kill"); err != nil {
			return fail("seccomp", err)
		}
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	strip := os.Getenv(envStrip)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ESCAPEPROBE_TEST_") || (strip != "" && strings.HasPrefix(kv, strip+"=")) {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	if s := os.Getenv(envUID); s != "" {
		id, err := strconv.Atoi(s)
		if err != nil {
			return fail("uid", err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(id), Gid: uint32(id)}}
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return fail("run probe", err)
}

// denyOtherABIs installs, on every thread of the calling process, a seccomp
// filter that allows x86_64 calls and denies the i386 ABI and the x32 bit,
// with EPERM or by killing the process.
func denyOtherABIs(kill bool) error {
	deny := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	if kill {
		deny = unix.SECCOMP_RET_KILL_PROCESS
	}
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
	)
	filter := []unix.SockFilter{
		{Code: ldAbs, K: 4}, // seccomp_data.arch
		{Code: jeq, Jt: 0, Jf: 3, K: unix.AUDIT_ARCH_X86_64},
		{Code: ldAbs, K: 0}, // seccomp_data.nr
		{Code: jge, Jt: 1, Jf: 0, K: x32Bit},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		{Code: ret, K: deny},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog)))
	return errnoOf(e)
}

// buildProbe builds the probe, static, into a fresh directory.
func buildProbe(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build the probe: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "escapeprobe")
	cmd := exec.Command(gobin, "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the probe is dynamically linked: it must run in any root filesystem")
		}
	}
	return bin
}

// runOpts describes one run of the probe under the test's init.
type runOpts struct {
	pidNS   bool     // a new pid namespace
	proc    bool     // with a fresh /proc (else the host's)
	uid     int      // run the probe as uid=gid (0: root)
	initEnv []string // extra environment of init
	strip   string   // a variable of initEnv the probe must not get
	stdin   *os.File // nil: /dev/null
	abi     string   // "errno" or "kill": a seccomp filter denying the i386 and x32 ABIs
}

// probeOutput is the probe's -json document, indexed.
type probeOutput struct {
	report
	code   int
	byName map[string]result
}

func (o probeOutput) check(t *testing.T, name string) result {
	t.Helper()
	r, ok := o.byName[name]
	if !ok {
		t.Fatalf("no result for check %q", name)
	}
	return r
}

func (o probeOutput) attempt(t *testing.T, check, name string) attempt {
	t.Helper()
	for _, a := range o.check(t, check).Attempts {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("check %s has no attempt %q: %+v", check, name, o.check(t, check))
	return attempt{}
}

// runProbe runs the probe with args (-json is added) and parses its report.
func runProbe(t *testing.T, r runOpts, probe string, args ...string) probeOutput {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, append([]string{probe, "-json"}, args...)...)
	cmd.Env = append(os.Environ(), envInit+"=1")
	if r.proc {
		cmd.Env = append(cmd.Env, envProc+"=1")
	}
	if r.uid != 0 {
		cmd.Env = append(cmd.Env, envUID+"="+strconv.Itoa(r.uid))
	}
	if r.strip != "" {
		cmd.Env = append(cmd.Env, envStrip+"="+r.strip)
	}
	if r.abi != "" {
		cmd.Env = append(cmd.Env, envABI+"="+r.abi)
	}
	cmd.Env = append(cmd.Env, r.initEnv...)
	flags := uintptr(unix.CLONE_NEWNS)
	if r.pidNS {
		flags |= unix.CLONE_NEWPID
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	if r.stdin != nil {
		cmd.Stdin = r.stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run probe: %v", err)
	}
	out := probeOutput{code: cmd.ProcessState.ExitCode(), byName: map[string]result{}}
	if err := json.Unmarshal(stdout.Bytes(), &out.report); err != nil {
		t.Fatalf("probe exit %d, output not JSON (%v):\n%s\nstderr:\n%s", out.code, err, stdout.String(), stderr.String())
	}
	for _, res := range out.Results {
		out.byName[res.Check] = res
	}
	if out.Exit != out.code {
		t.Errorf("report says exit %d, the probe exited %d", out.Exit, out.code)
	}
	t.Logf("probe exit %d", out.code)
	for _, res := range out.Results {
		t.Logf("%s %s %s", res.Check, res.Status, res.Detail)
	}
	return out
}

// kernelLacks reports whether every attempt of r failed because the
// kernel has no such feature (ENOSYS, or an absent file).
func kernelLacks(r result) bool {
	for _, a := range r.Attempts {
		if !strings.HasPrefix(a.Detail, "ENOSYS") && a.Detail != "absent" {
			return false
		}
	}
	return len(r.Attempts) > 0
}

func randomHex(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// listen accepts (and closes) connections on ln until the test ends.
func listen(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

// openPty returns the two ends of a new pseudo-terminal.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// hostState is what the probe must leave as it was.
type hostState struct {
	sysctls map[string]string
	mounts  []string // mountinfo lines under the test's directories
	trees   map[string]string
}

func snapshotHost(t *testing.T, roots ...string) hostState {
	t.Helper()
	s := hostState{sysctls: map[string]string{}, trees: map[string]string{}}
	for _, p := range []string{
		"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/randomize_va_space",
		"/proc/sys/net/ipv4/ip_forward", "/proc/sys/kernel/hostname",
	} {
		b, _ := os.ReadFile(p)
		s.sysctls[p] = string(b)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		for _, r := range roots {
			if strings.Contains(line, r) {
				s.mounts = append(s.mounts, line)
			}
		}
	}
	for _, r := range roots {
		s.trees[r] = describeTree(t, r)
	}
	return s
}

// describeTree lists every path under root with its type, mode, size and
// content digest (for small files).
func describeTree(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			lines = append(lines, p+" error "+err.Error())
			return nil
		}
		line := p + " " + fi.Mode().String() + " " + strconv.FormatInt(fi.Size(), 10)
		if fi.Mode().IsRegular() && fi.Size() < 1<<16 {
			b, _ := os.ReadFile(p)
			line += " " + hex.EncodeToString(b)
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (s hostState) assertSame(t *testing.T, after hostState) {
	t.Helper()
	for k, v := range s.sysctls {
		if after.sysctls[k] != v {
			t.Errorf("%s changed: %q -> %q", k, v, after.sysctls[k])
		}
	}
	if strings.Join(after.mounts, "\n") != strings.Join(s.mounts, "\n") {
		t.Errorf("host mounts under the test's directories changed:\nbefore:\n%s\nafter:\n%s",
			strings.Join(s.mounts, "\n"), strings.Join(after.mounts, "\n"))
	}
	for r, v := range s.trees {
		if after.trees[r] != v {
			t.Errorf("%s changed:\nbefore:\n%s\nafter:\n%s", r, v, after.trees[r])
		}
	}
}

// fixture is what the host offers for the probe to find.
type fixture struct {
	root                         string // everything below lives here
	probe, setuid                string
	scratch, marker, secretFile  string
	denyDir, denyFile, allowDir  string
	secretName, secretValue      string
	abstract, unixPath, hostPort string
	ptyMaster, ptySlave          *os.File
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{probe: buildProbe(t), root: t.TempDir()}
	mk := func(parts ...string) string { return filepath.Join(append([]string{f.root}, parts...)...) }
	for _, d := range []string{"host", "deny", "allow", "scratch", "bin"} {
		if err := os.Mkdir(mk(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, content string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	f.marker = mk("host", "marker")
	write(f.marker, "host only\n", 0o644)
	f.secretFile = mk("host", "secret-file")
	write(f.secretFile, "a secret file\n", 0o600)
	f.denyDir = mk("deny")
	write(mk("deny", "keep.txt"), "keep me\n", 0o644)
	f.denyFile = mk("host", "keep-file.txt")
	write(f.denyFile, "keep me too\n", 0o644)
	f.allowDir = mk("allow")
	f.scratch = mk("scratch")

	bin, err := os.ReadFile(f.probe)
	if err != nil {
		t.Fatal(err)
	}
	f.setuid = mk("bin", "escapeprobe-setuid")
	write(f.setuid, string(bin), 0o755)
	if err := os.Chown(f.setuid, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f.setuid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}

	f.secretName, f.secretValue = "ESCAPEPROBE_SECRET", "escapeprobe-secret-"+randomHex(t)
	f.abstract = "escapeprobe-test-" + randomHex(t)
	listen(t, "unix", "@"+f.abstract)
	f.unixPath = mk("host", "sock")
	listen(t, "unix", f.unixPath)
	_, f.hostPort, _ = net.SplitHostPort(listen(t, "tcp", "127.0.0.1:0").Addr().String())
	f.ptyMaster, f.ptySlave = openPty(t)
	return f
}

func (f *fixture) args() []string {
	return []string{
		"-secret", f.secretName + "=" + f.secretValue,
		"-secret-file", f.secretFile,
		"-marker", f.marker,
		"-deny-write", f.denyDir + "," + f.denyFile,
		"-allow-write", f.allowDir,
		"-setuid", f.setuid,
		"-abstract", f.abstract,
		"-unix", f.unixPath,
		"-host-port", f.hostPort,
		"-host-pid", strconv.Itoa(os.Getpid()),
		"-scratch", f.scratch,
	}
}

// TestProbe_DetectsHostEscapes runs every check as root, unconfined, in its
// own mount and pid namespaces: what a sandbox must block all works here,
// and the probe must say so, without changing the host.
func TestProbe_DetectsHostEscapes(t *testing.T) {
	testenv.NeedRoot(t, "runs the escape probe unconfined as root", false)
	f := newFixture(t)
	before := snapshotHost(t, f.root)

	out := runProbe(t, runOpts{
		pidNS: true, proc: true, stdin: f.ptySlave,
		initEnv: []string{f.secretName + "=" + f.secretValue}, strip: f.secretName,
	}, f.probe, append(f.args(), "all")...)

	if out.code != exitEscaped {
		t.Errorf("exit status %d, want %d", out.code, exitEscaped)
	}
	want := map[string]Status{
		"write-allowed": OK,
		// The host pid is not visible from the probe's pid namespace.
		"setns-host": Blocked, "procs": Blocked, "kill": Blocked,
		// Depend on the kernel's configuration: see kernelLacks.
		"kexec": "", "module": "", "x32": "", "sysrq": "",
	}
	for _, name := range checkNames() {
		st, listed := want[name]
		if !listed {
			st = Escaped
		}
		r := out.check(t, name)
		switch {
		case st == "":
			if r.Status != Escaped && !(r.Status == Blocked && kernelLacks(r)) {
				t.Errorf("%s: %s %s, want ESCAPED or a kernel without it", name, r.Status, r.Detail)
			}
		case r.Status != st:
			t.Errorf("%s: %s %s, want %s", name, r.Status, r.Detail, st)
		}
	}

	// The details that prove each check looked where it should.
	for _, w := range []struct{ check, attempt string }{
		{"mount", "tmpfs"}, {"mount", "bind"},
		{"chroot", "chroot"}, {"chroot", "escape"}, {"chroot", "marker-after-escape"},
		{"unshare-user", "user"}, {"clone-user", "clone"},
		{"ptrace-init", "seize:1"}, {"ptrace-parent", "seize:1"},
		{"bpf", "prog_load"}, {"bpf", "map_create"}, {"io-uring", "setup"},
		{"int80", "mount"}, {"int80", "unshare"}, {"int80", "bpf"}, {"int80", "ptrace"},
		{"int80", "io_uring_setup"}, {"int80", "perf_event_open"}, {"int80", "setns"},
		{"int80", "keyctl"}, {"int80", "reboot"}, {"int80", "personality"}, {"int80", "userfaultfd"},
		{"int80", "chroot"},
		{"environ", "proc-environ"}, {"tiocsti", "fd0"},
		{"abstract", "@" + f.abstract}, {"hostns-net", "127.0.0.1:" + f.hostPort},
		{"setuid", "capeff"}, {"caps", "CapEff"}, {"devfuse", "/dev/fuse"},
		{"proc-sys", "/proc/sys/kernel/core_pattern"},
	} {
		if a := out.attempt(t, w.check, w.attempt); a.Status != Escaped {
			t.Errorf("%s %s: %s %s, want ESCAPED", w.check, w.attempt, a.Status, a.Detail)
		}
	}
	if a := out.attempt(t, "environ", "proc-environ"); !strings.Contains(a.Detail, "/proc/1/environ") {
		t.Errorf("environ found the secret in %s, want /proc/1/environ (init's)", a.Detail)
	}
	if a := out.attempt(t, "environ", "own-environment"); a.Status != Blocked {
		t.Errorf("the probe's own environment: %s %s; init stripped the secret from it", a.Status, a.Detail)
	}
	// Every write attempt worked (and was undone: see assertSame).
	for _, a := range out.check(t, "write-deny").Attempts {
		if a.Status != Escaped {
			t.Errorf("write-deny %s: %s %s, want ESCAPED", a.Name, a.Status, a.Detail)
		}
	}
	if n := len(out.check(t, "write-deny").Attempts); n != 12 {
		t.Errorf("write-deny made %d attempts, want 8 on the directory and 4 on the file", n)
	}

	before.assertSame(t, snapshotHost(t, f.root))
}

// TestProbe_HostPidVisible runs, in the host's pid namespace (own mount
// namespace only), the checks that look for a host process: they must see
// the test's own process.
func TestProbe_HostPidVisible(t *testing.T) {
	testenv.NeedRoot(t, "runs the escape probe unconfined as root", false)
	f := newFixture(t)
	before := snapshotHost(t, f.root)

	// The checks that touch pid 1, the parent or every environment refuse
	// to run in the initial pid namespace; elsewhere (a CI container) they
	// would touch the container's processes, so they are not run at all.
	guarded := []string{"ptrace-init", "ptrace-parent", "process-vm", "setns", "environ"}
	if !initialPidNS() {
		guarded = nil
	}
	out := runProbe(t, runOpts{}, f.probe, append(append(f.args(), "procs", "kill", "setns-host"), guarded...)...)
	if out.code != exitEscaped {
		t.Errorf("exit status %d, want %d", out.code, exitEscaped)
	}
	host := strconv.Itoa(os.Getpid())
	for _, w := range []struct{ check, attempt string }{
		{"procs", "host-pid"}, {"kill", "kill0"}, {"kill", "pidfd_open"}, {"setns-host", "visible"}, {"setns-host", "net"},
	} {
		if a := out.attempt(t, w.check, w.attempt); a.Status != Escaped {
			t.Errorf("%s %s: %s %s, want ESCAPED (pid %s is visible)", w.check, w.attempt, a.Status, a.Detail, host)
		}
	}
	for _, name := range guarded {
		r := out.check(t, name)
		if r.Status != Errored || !strings.Contains(r.Detail, "initial_pid_namespace") {
			t.Errorf("%s in the host's pid namespace: %s %s, want ERROR (refusal)", name, r.Status, r.Detail)
		}
	}
	before.assertSame(t, snapshotHost(t, f.root))
}

// TestProbe_OuterProcVisible: in a new pid namespace that still shows the
// host's /proc, procs must notice without being told a host pid.
func TestProbe_OuterProcVisible(t *testing.T) {
	testenv.NeedRoot(t, "makes a pid namespace", false)
	probe := buildProbe(t)
	out := runProbe(t, runOpts{pidNS: true}, probe, "procs")
	if a := out.attempt(t, "procs", "nspid"); a.Status != Escaped {
		t.Errorf("procs nspid: %s %s, want ESCAPED", a.Status, a.Detail)
	}
	if out.code != exitEscaped {
		t.Errorf("exit status %d, want %d", out.code, exitEscaped)
	}
}

// TestProbe_OtherABIsFiltered runs int80 and x32 under a seccomp filter
// that denies those ABIs (EPERM, or killing the process): the probe must
// report BLOCKED, where it reports ESCAPED without the filter.
func TestProbe_OtherABIsFiltered(t *testing.T) {
	testenv.NeedRoot(t, "runs the probe in its own namespaces", false)
	if runtime.GOARCH != "amd64" {
		t.Skip("the i386 and x32 ABIs exist on amd64 only")
	}
	probe := buildProbe(t)
	for _, mode := range []string{"errno", "kill"} {
		t.Run(mode, func(t *testing.T) {
			out := runProbe(t, runOpts{pidNS: true, proc: true, abi: mode}, probe, "int80", "x32", "confined")
			want := "EPERM"
			if mode == "kill" {
				want = "killed-by-SIGSYS"
			}
			for _, name := range []string{"int80", "x32"} {
				r := out.check(t, name)
				if r.Status != Blocked {
					t.Errorf("%s: %s %s, want BLOCKED", name, r.Status, r.Detail)
				}
				for _, a := range r.Attempts {
					if a.Detail != want {
						t.Errorf("%s %s: %s, want %s", name, a.Name, a.Detail, want)
					}
				}
			}
			if r := out.check(t, "confined"); r.Status != Blocked {
				t.Errorf("confined under a filter with no_new_privs: %s %s", r.Status, r.Detail)
			}
			if out.code != exitClean {
				t.Errorf("exit status %d, want %d", out.code, exitClean)
			}
		})
	}
}

// TestProbe_Unprivileged runs the probe as nobody: what the kernel itself
// refuses an unprivileged process must be reported BLOCKED, and the
// setuid-root copy must be caught raising the effective uid.
func TestProbe_Unprivileged(t *testing.T) {
	testenv.NeedRoot(t, "runs the probe as another user", false)
	const nobody = 65534
	f := newFixture(t)
	// nobody must reach the probe and write in scratch and the allowed dir.
	for _, d := range []string{f.root, filepath.Dir(f.root), filepath.Dir(f.probe), filepath.Dir(filepath.Dir(f.probe))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(f.scratch, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f.allowDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	before := snapshotHost(t, f.denyDir, f.denyFile, f.marker)

	out := runProbe(t, runOpts{
		pidNS: true, proc: true, uid: nobody,
		initEnv: []string{f.secretName + "=" + f.secretValue}, strip: f.secretName,
	}, f.probe, append(f.args(), "-umount", f.scratch, "all")...)

	// The kernel refuses all of these to an unprivileged process on any
	// machine (bpf: unless kernel.unprivileged_bpf_disabled is 0).
	blocked := []string{
		"mount", "pivot-root", "unshare", "clone", "setns", "ptrace-parent", "ptrace-init", "process-vm",
		"open-by-handle", "reboot", "swap", "proc-sys", "sys-write", "environ", "write-deny",
	}
	if b, _ := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled"); strings.TrimSpace(string(b)) != "0" {
		blocked = append(blocked, "bpf")
	}
	for _, name := range blocked {
		if r := out.check(t, name); r.Status != Blocked {
			t.Errorf("%s as nobody: %s %s, want BLOCKED", name, r.Status, r.Detail)
		}
	}
	if r := out.check(t, "write-allowed"); r.Status != OK {
		t.Errorf("write-allowed as nobody in a directory it owns: %s %s", r.Status, r.Detail)
	}
	if a := out.attempt(t, "setuid", "euid"); a.Status != Escaped || a.Detail != "65534->0" {
		t.Errorf("setuid euid: %s %s, want ESCAPED 65534->0", a.Status, a.Detail)
	}
	if a := out.attempt(t, "devfuse", "mknod"); a.Status != Blocked {
		t.Errorf("devfuse mknod as nobody: %s %s, want BLOCKED", a.Status, a.Detail)
	}
	if a := out.attempt(t, "caps", "CapEff"); a.Status != Blocked {
		t.Errorf("caps CapEff as nobody: %s %s, want BLOCKED", a.Status, a.Detail)
	}
	if out.code != exitEscaped {
		t.Errorf("exit status %d, want %d", out.code, exitEscaped)
	}
	before.assertSame(t, snapshotHost(t, f.denyDir, f.denyFile, f.marker))
}

// TestProbe_Output checks the line format, the exit statuses and usage
// errors, with checks that read only.
func TestProbe_Output(t *testing.T) {
	probe := buildProbe(t)
	present := filepath.Join(t.TempDir(), "present")
	if err := os.WriteFile(present, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(t.TempDir(), "absent")
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		lines []string
	}{
		{"blocked", []string{"-secret-file", absent, "secret-file"}, exitClean,
			[]string{"secret-file BLOCKED " + absent + "=ENOENT"}},
		{"escaped", []string{"secret-file", "-secret-file", present + "," + absent}, exitEscaped,
			[]string{"secret-file ESCAPED " + present + "=exists " + absent + "=ENOENT"}},
		{"missing parameter", []string{"environ"}, exitError, []string{"environ ERROR needs -secret"}},
		{"unknown check", []string{"nosuch"}, exitError, nil},
		{"no check", nil, exitError, nil},
		{"bad secret", []string{"-secret", "NOVALUE", "environ"}, exitError, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(probe, tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Run()
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Errorf("exit %d, want %d; stderr: %s", got, tc.code, stderr.String())
			}
			got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if tc.lines == nil {
				if stdout.Len() != 0 || stderr.Len() == 0 {
					t.Errorf("stdout %q, stderr %q: want only a usage error", stdout.String(), stderr.String())
				}
				return
			}
			if strings.Join(got, "\n") != strings.Join(tc.lines, "\n") {
				t.Errorf("output:\n%s\nwant:\n%s", stdout.String(), strings.Join(tc.lines, "\n"))
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		statuses []Status
		want     int
	}{
		{nil, exitClean},
		{[]Status{Blocked, OK, Skipped}, exitClean},
		{[]Status{Blocked, Denied}, exitDenied},
		{[]Status{Denied, Errored}, exitError},
		{[]Status{Errored, Escaped, Denied}, exitEscaped},
	} {
		var rs []result
		for _, s := range tc.statuses {
			rs = append(rs, result{Status: s})
		}
		if got := exitCode(rs); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.statuses, got, tc.want)
		}
	}
	r := summarize("c", []attempt{{"a", Blocked, "EPERM"}, {"b", Escaped, "EINVAL(reached-kernel)"}, {"c", Errored, "x y"}})
	if r.Status != Escaped || r.Detail != "a=EPERM b=EINVAL(reached-kernel) c=x_y" {
		t.Errorf("summarize: %s %q", r.Status, r.Detail)
	}
}
