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

// enableURing is the fuse module's switch for FUSE over io_uring.
const enableURing = "/sys/module/fuse/parameters/enable_uring"

// NeedFUSEURing turns FUSE over io_uring on for the test (the fuse
// module's enable_uring parameter, set back at the end). On a kernel
// without it the test skips, in CI too (the kernel does not claim it); on
// one that has it but where it cannot be turned on, the test skips, and
// fails in CI.
func NeedFUSEURing(t testing.TB) {
	t.Helper()
	NeedRoot(t, "FUSE over io_uring", true)
	if _, err := os.Stat(enableURing); err != nil {
		t.Skipf("this kernel has no FUSE over io_uring (Linux 6.14 and later with CONFIG_FUSE_IO_URING): %v", err)
	}
	lockURing(t)
	old, err := os.ReadFile(enableURing)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(old)) == "Y" {
		return
	}
	if err := os.WriteFile(enableURing, []byte("Y"), 0); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the kernel has FUSE over io_uring, but it cannot be turned on (%v), and CI must not skip", err)
		}
		t.Skipf("FUSE over io_uring cannot be turned on: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(enableURing, old, 0); err != nil {
			t.Errorf("set %s back to %q: %v", enableURing, strings.TrimSpace(string(old)), err)
		}
	})
}

// lockURing holds an exclusive lock on the enable_uring parameter until
// the test ends: the switch is the machine's, and tests of other packages
// (go test runs them in parallel) or other checkouts may want it the other
// way at the same time. Cleanups run last-registered first, so the lock
// outlives the restore of the value.
func lockURing(t testing.TB) {
	t.Helper()
	f, err := os.Open(enableURing)
	if err != nil {
		t.Fatalf("lock %s: %v", enableURing, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", enableURing, err)
	}
	t.Cleanup(func() { f.Close() })
}

// NoFUSEURing turns FUSE over io_uring off for the test (set back at the
// end), as on a kernel without it. Where there is no such switch, the
// kernel has none, which is what the test wants.
func NoFUSEURing(t testing.TB) {
	t.Helper()
	NeedRoot(t, "turns FUSE over io_uring off", false)
	if _, err := os.Stat(enableURing); err != nil {
		return
	}
	lockURing(t)
	old, err := os.ReadFile(enableURing)
	if err != nil || strings.TrimSpace(string(old)) == "N" {
		return
	}
	if err := os.WriteFile(enableURing, []byte("N"), 0); err != nil {
		t.Fatalf("turn FUSE over io_uring off: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(enableURing, old, 0); err != nil {
			t.Errorf("set %s back to %q: %v", enableURing, strings.TrimSpace(string(old)), err)
		}
	})
}
