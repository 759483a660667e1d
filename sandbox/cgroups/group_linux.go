package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ParentDir is the directory, beneath this process's own cgroup in each
// hierarchy, that holds the groups Create makes.
const ParentDir = "cairn"

// mkdirAttempts bounds the retries when a concurrent Close removes the
// shared parent directory between our mkdir of it and of the group.
const mkdirAttempts = 5

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Group is one sandbox's cgroup: a directory in the cgroup2 hierarchy and
// one in each v1 hierarchy that holds a controller its limits need. Its
// methods are safe for concurrent use.
type Group struct {
	name  string
	v2Dir string // "" when no cgroup2 hierarchy is mounted
	// dirs are the group's directories, the cgroup2 one first.
	dirs []string
	// parents are the ParentDir directories holding dirs; Close removes
	// those that end up empty.
	parents []string
	// ctlDir maps each controller in use ("memory", "pids", "cpu") to the
	// directory that holds its files; ctlV2 says which of them are v2.
	ctlDir map[string]string
	ctlV2  map[string]bool

	mu     sync.Mutex
	fd     int // cgroup2 directory, opened by FD; -1 until then
	closed bool
	final  Stats // taken by Close before the directories go
}

// Create makes the cgroup of sandbox name, beneath this process's own cgroup
// in each hierarchy (so the sandbox stays inside whatever limits enclose this
// process), in a directory ParentDir/name:
//
//   - in the cgroup2 hierarchy, if one is mounted, always: its cgroup.kill
//     ends the sandbox and BPF programs attach to it (Path, FD);
//   - for each nonzero limit, in the v1 hierarchy that holds the controller
//     (memory, pids, cpu), or else in the cgroup2 directory with the
//     controller enabled.
//
// A limit whose controller no hierarchy offers is an error wrapping
// ErrNotSupported: Create never returns a group that lacks a limit asked for.
// Names must be unique among live groups: a leftover directory of the same
// name with no processes in it (from a crashed run) is removed and made
// afresh; one with processes is an error wrapping ErrExist. On any error
// every directory Create made is removed again.
func Create(name string, l Limits) (*Group, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("cgroups: group name %q: want 1-128 letters, digits, '.', '_' or '-', not starting with '.', '_' or '-': %w",
			name, ErrInvalid)
	}
	lay, err := readLayout()
	if err != nil {
		return nil, err
	}
	g := &Group{name: name, fd: -1, ctlDir: map[string]string{}, ctlV2: map[string]bool{}}

	// Place each controller a limit needs: v1 where a v1 hierarchy holds it
	// (a controller is bound to one hierarchy at a time), else cgroup2.
	var v1 []*hierarchy
	var v2ctls []string
	for _, c := range neededControllers(l) {
		if h := lay.v1[c]; h != nil {
			if !slices.Contains(v1, h) {
				v1 = append(v1, h)
			}
			continue
		}
		if lay.v2 != nil {
			avail, err := readFields(filepath.Join(lay.v2.dir, "cgroup.controllers"))
			if err != nil {
				return nil, err
			}
			if slices.Contains(avail, c) {
				v2ctls = append(v2ctls, c)
				continue
			}
		}
		where := "no cgroup2 hierarchy is mounted"
		if lay.v2 != nil {
			where = "it is not in " + filepath.Join(lay.v2.dir, "cgroup.controllers")
		}
		return nil, fmt.Errorf("cgroups: cannot apply the %s limit: no cgroup v1 hierarchy has the %s controller and %s: %w",
			c, c, where, ErrNotSupported)
	}
	if lay.v2 == nil && len(v1) == 0 {
		return nil, fmt.Errorf("cgroups: no cgroup2 hierarchy is mounted and no limit needs a v1 one: %w", ErrNotSupported)
	}

	if err := g.makeDirs(lay, v1, v2ctls); err != nil {
		g.removeDirs()
		return nil, err
	}
	if err := g.applyLimits(l); err != nil {
		g.removeDirs()
		return nil, err
	}
	return g, nil
}

// neededControllers lists the controllers l's nonzero limits need.
func neededControllers(l Limits) []string {
	var c []string
	if l.MemoryBytes > 0 {
		c = append(c, "memory")
	}
	if l.Pids > 0 {
		c = append(c, "pids")
	}
	if l.CPUs > 0 {
		c = append(c, "cpu")
	}
	return c
}

func readLayout() (*layout, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	return parseLayout(mi, pc)
}

// makeDirs creates the group's directories, recording each in g as it is
// made so that removeDirs can undo a partial Create.
func (g *Group) makeDirs(lay *layout, v1 []*hierarchy, v2ctls []string) error {
	if lay.v2 != nil {
		dir, err := g.makeDir(lay.v2.dir, v2ctls)
		if err != nil {
			return err
		}
		g.v2Dir = dir
		for _, c := range v2ctls {
			g.ctlDir[c], g.ctlV2[c] = dir, true
		}
	}
	for _, h := range v1 {
		dir, err := g.makeDir(h.dir, nil)
		if err != nil {
			return err
		}
		for _, c := range h.controllers {
			g.ctlDir[c] = dir
		}
	}
	return nil
}

// makeDir creates base/ParentDir/name, with the cgroup2 controllers ctls
// enabled for it.
func (g *Group) makeDir(base string, ctls []string) (string, error) {
	parent := filepath.Join(base, ParentDir)
	dir := filepath.Join(parent, g.name)
	for attempt := 1; ; attempt++ {
		err := makeParent(base, parent, ctls)
		if err == nil {
			if !slices.Contains(g.parents, parent) {
				g.parents = append(g.parents, parent)
			}
			err = makeLeaf(dir)
		}
		if err == nil {
			g.dirs = append(g.dirs, dir)
			return dir, nil
		}
		// The parent vanished under us: a concurrent Close removed it.
		if errors.Is(err, fs.ErrNotExist) && attempt < mkdirAttempts {
			continue
		}
		return "", err
	}
}

// makeParent creates the shared parent directory, and on cgroup2 enables the
// controllers ctls down to it.
func makeParent(base, parent string, ctls []string) error {
	if len(ctls) > 0 {
		if err := enableControllers(base, ctls); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("cgroups: cannot delegate the %s controller(s) to child groups of %s: that cgroup has processes in it "+
					"and cgroup v2 allows controllers only below cgroups without processes; run cairn in a cgroup whose "+
					"cgroup.subtree_control already enables them (e.g. a systemd unit with Delegate=yes whose processes "+
					"live in a leaf cgroup): %w: %w", strings.Join(ctls, ", "), base, unix.EBUSY, ErrNotSupported)
			}
			return err
		}
	}
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroups: %w", err)
	}
	if len(ctls) > 0 {
		return enableControllers(parent, ctls)
	}
	return nil
}

// enableControllers writes +ctl to dir's cgroup.subtree_control for each
// controller not yet enabled there.
func enableControllers(dir string, ctls []string) error {
	on, err := readFields(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	for _, c := range ctls {
		if slices.Contains(on, c) {
			continue
		}
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+c); err != nil {
			return err
		}
	}
	return nil
}

// makeLeaf creates the group's own directory. A leftover one with no
// processes and no child groups is replaced.
func makeLeaf(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroups: %w", err)
	}
	pids, err := readPids(dir)
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		return fmt.Errorf("cgroups: %s already exists with %d processes in it (pids %v): another sandbox of that name is running, "+
			"or one was left behind; end it or choose another name: %w", dir, len(pids), pids, ErrExist)
	}
	if err := unix.Rmdir(dir); err != nil {
		return fmt.Errorf("cgroups: %s already exists and cannot be removed (%v): it has child groups or is busy; remove it by hand: %w",
			dir, err, ErrExist)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	return nil
}

// applyLimits writes l into the controllers' files.
func (g *Group) applyLimits(l Limits) error {
	if l.MemoryBytes > 0 {
		dir, v := g.ctlDir["memory"], strconv.FormatInt(l.MemoryBytes, 10)
		if g.ctlV2["memory"] {
			if err := writeFile(filepath.Join(dir, "memory.max"), v); err != nil {
				return err
			}
			// Swap would let the group hold more than the limit. The file
			// is missing only when the kernel does not account swap.
			if err := writeIfExists(filepath.Join(dir, "memory.swap.max"), "0"); err != nil {
				return err
			}
		} else {
			if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), v); err != nil {
				return err
			}
			// memsw is memory+swap: set to the same value, swap cannot hide
			// the limit. Without swap accounting, keep the group out of swap.
			memsw := filepath.Join(dir, "memory.memsw.limit_in_bytes")
			if _, err := os.Stat(memsw); err == nil {
				if err := writeFile(memsw, v); err != nil {
					return err
				}
			} else if err := writeFile(filepath.Join(dir, "memory.swappiness"), "0"); err != nil {
				return err
			}
		}
	}
	if l.Pids > 0 {
		if err := writeFile(filepath.Join(g.ctlDir["pids"], "pids.max"), strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	if l.CPUs > 0 {
		dir, quota := g.ctlDir["cpu"], l.cpuQuotaUs()
		if g.ctlV2["cpu"] {
			if err := writeFile(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, cpuPeriodUs)); err != nil {
				return err
			}
		} else {
			if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(cpuPeriodUs)); err != nil {
				return err
			}
			if err := writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Add moves process pid into every hierarchy of the group (all its threads;
// its future children follow). It is harmless for a process already in some
// of them, e.g. one started in the cgroup2 directory through FD. If it fails
// part way the process may be in some directories only: kill it.
func (g *Group) Add(pid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("cgroups: add %d to %s: %w", pid, g.name, ErrClosed)
	}
	for _, dir := range g.dirs {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err // names the pid and the directory
		}
	}
	return nil
}

// FD returns a descriptor of the group's cgroup2 directory, for starting a
// process directly inside it with clone3's CLONE_INTO_CGROUP
// (syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}). The group owns it:
// do not close it; it stays valid until Close.
//
// CLONE_INTO_CGROUP covers the cgroup2 hierarchy only. Where limits live in
// v1 hierarchies, the new process must then be passed to Add before it runs
// anything that the limits should govern: have it wait (e.g. on a pipe)
// until the parent has called Add.
//
// Without a cgroup2 hierarchy FD returns an error wrapping ErrNotSupported.
func (g *Group) FD() (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return -1, fmt.Errorf("cgroups: %s: %w", g.name, ErrClosed)
	}
	if g.v2Dir == "" {
		return -1, fmt.Errorf("cgroups: no cgroup2 hierarchy is mounted: %w", ErrNotSupported)
	}
	if g.fd < 0 {
		fd, err := unix.Open(g.v2Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("cgroups: open %s: %w", g.v2Dir, err)
		}
		g.fd = fd
	}
	return g.fd, nil
}

// Path returns the group's cgroup2 directory (where BPF programs attach), or
// "" where no cgroup2 hierarchy is mounted.
func (g *Group) Path() string { return g.v2Dir }

// Close kills every process of the group (see Kill), records the final
// Stats, and removes the group's directories, and the shared parent
// directories when they are left empty. Once it has succeeded, further calls
// do nothing and return nil; after a failure (a process that would not die)
// it can be called again.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	var errs []error
	if err := g.kill(); err != nil {
		errs = append(errs, err)
	}
	g.final = g.readStats()
	left := g.dirs[:0]
	for _, d := range g.dirs {
		if err := rmdirWait(d); err != nil {
			errs = append(errs, err)
			left = append(left, d)
		}
	}
	g.dirs = left
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	removeParents(g.parents)
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	g.closed = true
	return nil
}

// removeDirs undoes a partial Create.
func (g *Group) removeDirs() {
	for _, d := range g.dirs {
		unix.Rmdir(d)
	}
	removeParents(g.parents)
}

// removeParents removes the shared parent directories that are empty; one
// still holding another group stays.
func removeParents(parents []string) {
	for _, p := range parents {
		unix.Rmdir(p)
	}
}

// readFields returns the whitespace-separated words of a cgroup file.
func readFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	return strings.Fields(string(b)), nil
}

// readPids returns the processes listed in dir's cgroup.procs, without
// duplicates (v1 may list a process twice).
func readPids(dir string) ([]int, error) {
	fields, err := readFields(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(fields))
	for _, f := range fields {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroups: %s/cgroup.procs: bad pid %q", dir, f)
		}
		if !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// writeFile writes value to an existing cgroup file in one write, as the
// kernel expects.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroups: write %q to %s: %w", value, path, err)
	}
	return nil
}

// writeIfExists is writeFile for a file the kernel may not have.
func writeIfExists(path, value string) error {
	err := writeFile(path, value)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
