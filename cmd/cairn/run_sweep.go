package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/netpolicy/cgroupbpf"
	"github.com/cairnfs/cairn/sandbox/cgroups"
)

// Cleaning up after runs that died.
//
// A `cairn run` that is killed (SIGKILL, the OOM killer) cannot undo what
// its egress policy set up: the bpffs it mounted at HOME/run/bpf-*, the
// programs pinned there, still attached to the sandbox's cgroup (so the
// cgroup stays denied: it fails closed), and that cgroup, which the sandbox
// left empty when it died with its supervisor (the sandbox's init has
// PDEATHSIG). The next run of the same home removes them.
//
// Which runs are dead: every run holds a shared flock on HOME/run/runs.lock
// for as long as its process lives (the kernel drops it however the process
// ends). A starting run sweeps only when it can take that lock exclusively,
// that is when no other run of the home is alive, so everything under
// HOME/run/bpf-* then belongs to dead runs and a live run's mount is never
// touched. While runs of a home overlap, leftovers wait for a run that
// starts alone: meanwhile they are programs attached to an empty cgroup.
//
// Even then, the programs of a cgroup that still holds processes stay: those
// processes would be let out. The sweep reports it and leaves that mount.

const (
	// runLockName is the lock file in HOME/run.
	runLockName = "runs.lock"
	// staleCgroupAge is how old an empty sandbox cgroup must be for the
	// sweep to remove it when no pin ties it to a dead run of this home
	// (cgroups.Sweep: it may be another home's run that has just made it).
	staleCgroupAge = time.Hour
)

// sweepRuns removes what dead runs of home left behind, when no other run
// of home is alive, and marks this run alive until the returned function
// is called (or the process ends). Problems are reported on stderr and
// never stop the run.
func sweepRuns(home string, stderr io.Writer) (release func()) {
	report := func(err error) { fmt.Fprintf(stderr, "cairn: clean up after an earlier run: %v\n", err) }
	dir := filepath.Join(home, "run")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		report(err)
		return func() {}
	}
	f, err := os.OpenFile(filepath.Join(dir, runLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		report(err)
		return func() {}
	}
	fd := int(f.Fd())
	switch err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		for _, err := range sweepDeadRuns(dir) {
			report(err)
		}
	case !errors.Is(err, unix.EWOULDBLOCK):
		report(fmt.Errorf("lock %s: %w", f.Name(), err))
	}
	// From here on this run is alive: a shared lock (which waits only while
	// another run sweeps) until it ends.
	if err := flock(fd, unix.LOCK_SH); err != nil {
		report(fmt.Errorf("lock %s: %w", f.Name(), err))
	}
	return func() { f.Close() }
}

func flock(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); err != unix.EINTR {
			return err
		}
	}
}

// sweepDeadRuns removes the per-run bpffs mounts in dir (HOME/run) with
// their pins and their runs' cgroups, then empty sandbox cgroups older than
// staleCgroupAge. The caller holds runs.lock exclusively.
func sweepDeadRuns(dir string) []error {
	var errs []error
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []error{err}
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "bpf-") {
			continue
		}
		mnt := filepath.Join(dir, e.Name())
		if isBPFFS(mnt) {
			if err := removeDeadPins(mnt); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", mnt, err))
				continue
			}
		}
		if err := os.Remove(mnt); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if _, err := cgroups.Sweep(staleCgroupAge); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func isBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// removeDeadPins removes the pins in each directory of the bpffs mnt (one
// per session: netpolicy.Config.PinName) and the cgroups their links are
// attached to, unless one of those cgroups still has processes: that
// session's programs stay attached, and so does the mount.
func removeDeadPins(mnt string) error {
	entries, err := os.ReadDir(mnt)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		groups, err := cgroupbpf.RemoveDead(filepath.Join(mnt, e.Name()))
		if errors.Is(err, cgroupbpf.ErrInUse) {
			err = fmt.Errorf("a dead run's egress programs: %w; the next run then removes the rest", err)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, cg := range groups {
			if err := unix.Rmdir(cg); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", cg, err))
			}
		}
	}
	return errors.Join(errs...)
}
