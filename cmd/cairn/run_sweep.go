package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
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
// attached to, unless one of those cgroups still has processes.
func removeDeadPins(mnt string) error {
	entries, err := os.ReadDir(mnt)
	if err != nil {
		return err
	}
	var pinDirs, groups []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		pins := filepath.Join(mnt, e.Name())
		cgs, err := linkedCgroups(pins)
		if err != nil {
			return err
		}
		for _, cg := range cgs {
			populated, err := cgroupPopulated(cg)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: the cgroup of a dead run's pinned programs: %w; the programs stay attached", pins, err)
			}
			if populated {
				return fmt.Errorf("%s: the cgroup %s of a dead run still has processes: its egress programs stay attached; "+
					"kill those processes (write 1 to %s/cgroup.kill) and the next run removes the rest", pins, cg, cg)
			}
		}
		pinDirs, groups = append(pinDirs, pins), append(groups, cgs...)
	}
	var errs []error
	for _, pins := range pinDirs {
		if err := cgroupbpf.RemovePinned(pins); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, cg := range groups {
		if err := unix.Rmdir(cg); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", cg, err))
		}
	}
	return errors.Join(errs...)
}

// linkedCgroups lists the cgroup2 directories that the links pinned in
// pins are attached to. A link whose cgroup is gone has none.
func linkedCgroups(pins string) ([]string, error) {
	entries, err := os.ReadDir(pins)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		path := filepath.Join(pins, e.Name())
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			m, merr := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
			if merr != nil {
				// Neither: it might tie a cgroup that is not known.
				return nil, fmt.Errorf("pin %s: %w", path, err)
			}
			m.Close()
			continue
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			return nil, fmt.Errorf("pinned link %s: %w", path, err)
		}
		cg := info.Cgroup()
		if cg == nil || cg.CgroupId == 0 {
			continue
		}
		dir, err := cgroupByID(cg.CgroupId)
		if errors.Is(err, unix.ESTALE) || errors.Is(err, unix.ENOENT) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("the cgroup of pinned link %s: %w", path, err)
		}
		if !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	return out, nil
}

// cgroupByID returns the path of the cgroup2 directory whose ID (its inode
// number, which BPF link info reports) is id: open_by_handle_at on the
// cgroup2 mount with a kernfs file handle, as systemd does.
func cgroupByID(id uint64) (string, error) {
	root, err := cgroup2Root()
	if err != nil {
		return "", err
	}
	mfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(mfd)
	const fileIDKernfs = 0xfe // FILEID_KERNFS: the handle is the 8-byte kernfs node ID
	var h [8]byte
	binary.NativeEndian.PutUint64(h[:], id)
	fd, err := unix.OpenByHandleAt(mfd, unix.NewFileHandle(fileIDKernfs, h[:]), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("open cgroup %d: %w", id, err)
	}
	defer unix.Close(fd)
	dir, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("cgroup %d is outside this mount namespace (%s)", id, dir)
	}
	return dir, nil
}

// cgroup2Root is the mount point of the whole cgroup2 hierarchy.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		// 36 35 0:30 / /sys/fs/cgroup rw,... - cgroup2 cgroup2 rw
		if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
			return unescapeMountPath(f[4]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup2 hierarchy is mounted")
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupPopulated reports whether the cgroup2 directory dir or one below it
// has a process.
func cgroupPopulated(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("%s/cgroup.events has no populated line", dir)
}
