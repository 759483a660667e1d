// Package cgrouptest gives netpolicy's tests what they need of cgroup2:
// this process's own cgroup2 directory and fresh child cgroups removed at
// the end of a test, a child process (the test binary re-executed) started
// in one of them, a loopback TCP server for it to reach, and the CI rule for
// skips.
package cgrouptest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// SkipOrFail skips with why, or fails in CI, where a skip would hide a
// suite.
func SkipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI must not skip it", why)
	}
	t.Skip(why)
}

// Own is this process's cgroup2 directory: the cgroup2 mount point (from
// /proc/self/mountinfo) joined with the "0::" line of /proc/self/cgroup.
func Own() (string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	mount := ""
	for line := range strings.SplitSeq(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
			mount = f[4]
			break
		}
	}
	if mount == "" {
		return "", errors.New("no cgroup2 mount")
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(cg), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mount, rest), nil
		}
	}
	return "", errors.New("no cgroup2 line in /proc/self/cgroup")
}

var seq atomic.Int64

// New creates an empty cgroup2 directory named after prefix under dir
// (this process's cgroup when dir is ""; the test skips, or fails in CI,
// without cgroup2), removed at the end of the test.
func New(t testing.TB, dir, prefix string) string {
	t.Helper()
	if dir == "" {
		var err error
		if dir, err = Own(); err != nil {
			SkipOrFail(t, "no cgroup2: "+err.Error())
		}
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1)))
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove cgroup %s: %v", path, err)
		}
	})
	return path
}
