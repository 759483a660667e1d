// Package testenv holds what tests across cairn need from the machine:
// root (mounts, FUSE, other users), a small tmpfs, the process's RSS. Tests
// that need what is missing skip with the reason, except in CI (CI=true),
// where a skip would hide a suite: there they fail. It imports no cairn
// package, so any test may use it.
package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// NeedRoot skips the test unless it runs as root (and, with fuse, /dev/fuse
// exists); in CI it fails instead. why says what root is for.
func NeedRoot(t testing.TB, why string, fuse bool) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "needs root (" + why + ")"
	} else if _, err := os.Stat("/dev/fuse"); fuse && err != nil {
		missing = "needs /dev/fuse (" + why + ")"
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI must not skip it", missing)
	}
	t.Skip(missing)
}

// SmallDisk mounts a tmpfs of size (e.g. "1m") on a temporary directory for
// the test (a disk that fills up), unmounted at the end.
func SmallDisk(t testing.TB, size string) string {
	t.Helper()
	NeedRoot(t, "mounts a small tmpfs", false)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// RSS returns the process's resident set size in bytes (VmRSS), or 0 where
// /proc is not available.
func RSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
