package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.MaybeInit()
	if os.Getenv(unprivilegedEnv) != "" {
		os.Exit(runUnprivileged())
	}
	os.Exit(m.Run())
}

// requireRoot skips a test that needs host root (namespaces, cgroups,
// mounts); in CI (CI=true) it fails instead.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("sandbox tests need root (namespaces, cgroups, mounts), and CI must not skip them")
	}
	t.Skip("needs root (namespaces, cgroups, mounts)")
}

// outcome is what a sandboxed run printed and returned.
type outcome struct {
	res            *sandbox.Result
	err            error
	stdout, stderr string
}

// newSpec returns a Spec running sh -c script with a fresh workspace.
func newSpec(t testing.TB, script string) *sandbox.Spec {
	t.Helper()
	return &sandbox.Spec{
		Args:      []string{"/bin/sh", "-c", script},
		Workspace: t.TempDir(),
	}
}

// run runs s, capturing its output.
func run(t testing.TB, s *sandbox.Spec) outcome {
	t.Helper()
	requireRoot(t)
	var stdout, stderr bytes.Buffer
	if s.Stdout == nil {
		s.Stdout = &stdout
	}
	if s.Stderr == nil {
		s.Stderr = &stderr
	}
	res, err := sandbox.Run(context.Background(), s)
	return outcome{res: res, err: err, stdout: stdout.String(), stderr: stderr.String()}
}

// mustRun runs s and fails the test unless it ran to an end with status 0.
func mustRun(t testing.TB, s *sandbox.Spec) outcome {
	t.Helper()
	o := run(t, s)
	if o.err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", o.err, o.stdout, o.stderr)
	}
	if o.res.ExitCode != 0 {
		t.Fatalf("exit status %d (%s)\nstdout:\n%s\nstderr:\n%s", o.res.ExitCode, o.res.Signal, o.stdout, o.stderr)
	}
	return o
}

func lines(s string) []string {
	return strings.Split(strings.TrimSpace(s), "\n")
}

// uniqueSleep returns a duration for sleep(1) that no other process has on
// its command line: a marker to find the sandbox's processes from the host.
func uniqueSleep() string {
	return fmt.Sprintf("%d.%06d", 100000+rand.IntN(800000), rand.IntN(1000000))
}

// procInfo is a process seen from the host.
type procInfo struct {
	pid    int
	status map[string]string // /proc/<pid>/status, key: value
}

// watchProcesses polls, from the host, the cgroup2 directory cgDir for
// processes running "sleep marker", until n of them are seen (then, with
// kill, it SIGKILLs them) or the cgroup is gone; the channel gets what was
// seen.
func watchProcesses(cgDir, marker string, n int, kill bool) <-chan []procInfo {
	out := make(chan []procInfo, 1)
	go func() {
		seen := map[int]procInfo{}
		for len(seen) < n {
			data, err := os.ReadFile(filepath.Join(cgDir, "cgroup.procs"))
			if err != nil {
				break // the cgroup is gone: the run ended
			}
			for _, f := range strings.Fields(string(data)) {
				pid, _ := strconv.Atoi(f)
				if _, ok := seen[pid]; ok || !hasMarker(pid, marker) {
					continue
				}
				if st := procStatus(pid); st != nil {
					seen[pid] = procInfo{pid: pid, status: st}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		var list []procInfo
		for _, p := range seen {
			list = append(list, p)
			if kill {
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		out <- list
	}()
	return out
}

func hasMarker(pid int, marker string) bool {
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Contains(string(cmdline), "sleep\x00"+marker)
}

func procStatus(pid int) map[string]string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	st := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(l, ":")
		st[k] = strings.TrimSpace(v)
	}
	return st
}

// hostProcesses lists the host's processes running "sleep marker".
func hostProcesses(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && hasMarker(pid, marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitForFile waits until path exists (bounded by the test's timeout).
func waitForFile(path string) {
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
