package seccomp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests install the filter in a child: the test binary re-executes
// itself with childEnv set to a mode, and TestMain hands over to runChild,
// which reports on stdout. The parent test never installs the filter.
const childEnv = "CAIRN_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

// requireSeccomp skips the test when the kernel cannot take the filter,
// except in CI (CI=true), where it fails.
func requireSeccomp(t testing.TB) {
	t.Helper()
	if err := Supported(); err != nil {
		skipOrFail(t, "needs seccomp filters: %v", err)
	}
}

// startChild runs the test binary in the given child mode, in a session of
// its own (no controlling terminal), and returns its stdout. Whatever the
// child leaves running is killed with its process group when it exits, or
// after five minutes.
func startChild(t testing.TB, mode string, env ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	// TMPDIR: what the child and its programs leave behind goes with the test.
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode, "TMPDIR="+t.TempDir()), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Start()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	// Anything the child left in its process group goes now. (The group
	// outlives the child only if a member is left, so the id is not reused.)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("child %q: %v\nstdout:\n%s\nstderr:\n%s", mode, err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("child %q stderr:\n%s", mode, stderr.String())
	}
	return stdout.String()
}

func runChild(mode string) int {
	if inner, ok := strings.CutPrefix(mode, "parent-of:"); ok {
		return childParentOf(inner)
	}
	switch mode {
	case "probes-filtered", "probes-control":
		return childProbes(mode == "probes-filtered")
	case "runtime":
		return childChecks(runtimeChecks())
	case "tools":
		return childChecks(toolChecks())
	case "tsync":
		return childThreadSync()
	case "bench":
		return childBench()
	}
	fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
	return 2
}

func childProbes(filtered bool) int {
	if filtered {
		if err := Install(); err != nil {
			fmt.Fprintf(os.Stderr, "Install: %v\n", err)
			return 1
		}
	}
	// personality is per thread: keep every probe on one thread.
	lockThread()
	enc := json.NewEncoder(os.Stdout)
	for _, p := range allProbes() {
		if err := enc.Encode(p.run(filtered)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// childParentOf runs the test binary in mode inner as its child, passes its
// output through and exits with its status. The probes attack their parent:
// this throwaway process takes the hit if the filter fails, not the test.
func childParentOf(inner string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+inner)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", inner, err)
		return 1
	}
	return 0
}

func runProbes(t *testing.T, mode string) map[string]probeResult {
	out := startChild(t, "parent-of:"+mode)
	res := map[string]probeResult{}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var r probeResult
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("child output: %v\n%s", err, out)
		}
		res[r.Name] = r
	}
	return res
}

func TestSupported(t *testing.T) {
	requireSeccomp(t)
}

// TestInstall_BlockedCalls makes every probe under the filter and without it,
// on the x86_64 ABI and through INT $0x80 on the i386 ABI.
func TestInstall_BlockedCalls(t *testing.T) {
	requireSeccomp(t)
	filtered := runProbes(t, "probes-filtered")
	control := runProbes(t, "probes-control")
	root := os.Geteuid() == 0
	if !root {
		t.Log("not root: the control run cannot show that the kernel would have allowed the calls")
	}
	for _, p := range allProbes() {
		t.Run(p.name, func(t *testing.T) {
			got, ok := filtered[p.name]
			if !ok {
				t.Fatal("no result from the filtered child")
			}
			if e := unix.Errno(got.Errno); e != p.want {
				t.Errorf("under the filter: errno %d (%v), value %d; want errno %d (%v)", e, e, got.Val, p.want, p.want)
			}
			if p.isPID && got.Errno == 0 && got.Val <= 0 {
				t.Errorf("under the filter: returned %d, want a pid", got.Val)
			}
			c, ok := control[p.name]
			if !ok {
				t.Fatal("no result from the control child")
			}
			ce := unix.Errno(c.Errno)
			switch {
			case !p.filter && ce != p.want:
				t.Errorf("without the filter: errno %d (%v), want %d (%v) as under the filter", ce, ce, p.want, p.want)
			case p.filter && ce == p.want && root && !p.kernelMayRefuse:
				t.Errorf("without the filter the call fails with %v too: this probe does not show the filter at work", ce)
			case p.filter && ce == p.want:
				t.Logf("without the filter the call fails with %v too (this machine)", ce)
			}
		})
	}
}

// A check is one thing a program does under the filter in the runtime and
// tools children. A check that returns errSkip is reported as skipped.
type check struct {
	name     string
	optional bool // may be skipped (a tool that is not installed)
	fn       func() error
}

var errSkip = errors.New("skip")

func childChecks(checks []check) int {
	if err := Install(); err != nil {
		fmt.Printf("FAIL install: %v\n", err)
		return 0
	}
	for _, c := range checks {
		switch err := c.fn(); {
		case errors.Is(err, errSkip):
			fmt.Printf("skip %s: %v\n", c.name, err)
		case err != nil:
			fmt.Printf("FAIL %s: %s\n", c.name, strings.ReplaceAll(err.Error(), "\n", "\\n"))
		default:
			fmt.Printf("ok %s\n", c.name)
		}
	}
	return 0
}

func assertChecks(t *testing.T, mode string, checks []check) {
	out := startChild(t, mode)
	results := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		status, rest, _ := strings.Cut(line, " ")
		name, _, _ := strings.Cut(rest, ":")
		results[name] = status
		switch status {
		case "FAIL":
			t.Errorf("under the filter: %s", rest)
		case "skip":
			t.Logf("%s", line)
		}
	}
	for _, c := range checks {
		switch st := results[c.name]; {
		case st == "":
			t.Errorf("%s: no result (child output:\n%s)", c.name, out)
		case st == "skip" && !c.optional:
			t.Errorf("%s: skipped", c.name)
		}
	}
}

// TestInstall_GoRuntime proves that a Go program keeps working normally after
// Install in the same process: goroutines, threads, GC, timers, signals,
// files, loopback networking, os/exec.
func TestInstall_GoRuntime(t *testing.T) {
	requireSeccomp(t)
	assertChecks(t, "runtime", runtimeChecks())
}

// TestInstall_Tools runs common programs under the filter: a shell and
// coreutils, python3, git, the go command.
func TestInstall_Tools(t *testing.T) {
	requireSeccomp(t)
	assertChecks(t, "tools", toolChecks())
}

// childThreadSync gives one thread a seccomp filter of its own, then calls
// Install from another thread: TSYNC cannot apply to the first, and Install
// must say which thread.
func childThreadSync() int {
	lockThread()
	tids := make(chan int)
	errs := make(chan error)
	go func() {
		lockThread() // this thread keeps its filter until the process exits
		allowAll := []unix.SockFilter{{Code: opRetK, K: retAllow}}
		prog := unix.SockFprog{Len: 1, Filter: &allowAll[0]}
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errs <- err
			return
		}
		if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(ptr(&prog))); e != 0 {
			errs <- e
			return
		}
		tids <- unix.Gettid()
		select {}
	}()
	var tid int
	select {
	case err := <-errs:
		fmt.Printf("setup error: %v\n", err)
		return 1
	case tid = <-tids:
	}
	err := Install()
	var tse *ThreadSyncError
	asTID := -1
	if errors.As(err, &tse) {
		asTID = tse.TID
	}
	status, _ := os.ReadFile("/proc/thread-self/status")
	fmt.Printf("tid=%d as=%d is=%v seccomp=%q err=%v\n", tid, asTID, errors.Is(err, ErrThreadSync),
		statusField(string(status), "Seccomp"), err)
	return 0
}

func TestInstall_ThreadSync(t *testing.T) {
	requireSeccomp(t)
	out := strings.TrimSpace(startChild(t, "tsync"))
	var tid, asTID int
	var is bool
	var seccompMode string
	if _, err := fmt.Sscanf(out, "tid=%d as=%d is=%t seccomp=%q", &tid, &asTID, &is, &seccompMode); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	t.Log(out)
	if asTID != tid {
		t.Errorf("Install returned a ThreadSyncError for thread %d, want %d (the thread with its own filter)", asTID, tid)
	}
	if !is {
		t.Error("errors.Is(err, ErrThreadSync) is false")
	}
	if seccompMode != "0" {
		t.Errorf("the calling thread is in seccomp mode %q after the failed Install, want 0 (no filter)", seccompMode)
	}
}

// childBench times one system call, with or without the filter. The
// parent's benchmark reports the child's figure.
func childBench() int {
	spec := os.Getenv("CAIRN_SECCOMP_BENCH") // call,n,filtered
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "bad CAIRN_SECCOMP_BENCH %q\n", spec)
		return 2
	}
	n, _ := strconv.Atoi(parts[1])
	if parts[2] == "filtered" {
		if err := Install(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	var nr, a0, a1 uintptr
	switch parts[0] {
	case "getppid": // allowed by number: the kernel's action cache skips the filter
		nr = unix.SYS_GETPPID
	case "ioctl": // allowed after an argument check: the filter runs
		nr, a0, a1 = unix.SYS_IOCTL, ^uintptr(0), tcgets
	case "mount": // denied
		nr = unix.SYS_MOUNT
	}
	lockThread()
	start := time.Now()
	for range n {
		unix.RawSyscall(nr, a0, a1, 0)
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}

// BenchmarkSyscall compares the cost of system calls without and with the
// filter, measured in a child process.
func BenchmarkSyscall(b *testing.B) {
	requireSeccomp(b)
	for _, call := range []string{"getppid", "ioctl", "mount"} {
		for _, mode := range []string{"unfiltered", "filtered"} {
			b.Run(call+"/"+mode, func(b *testing.B) {
				out := startChild(b, "bench", fmt.Sprintf("CAIRN_SECCOMP_BENCH=%s,%d,%s", call, b.N, mode))
				ns, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
				if err != nil {
					b.Fatalf("child output %q: %v", out, err)
				}
				b.ReportMetric(ns/float64(b.N), "ns/op")
			})
		}
	}
}

func statusField(status, field string) string {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
