package cgroupbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// RemoveDead removes the pins that a process which has died left in dir
// (its Pin directory), as RemovePinned does, unless a process is still
// policed by them. It first finds the cgroup2 directories that the links
// pinned in dir are attached to (a link whose cgroup is gone has none). If
// one of them, or a cgroup below it, still holds a process, RemoveDead
// removes nothing and returns an error wrapping ErrInUse: the programs stay
// attached (fail closed). Otherwise it removes the pins and returns those
// cgroup directories, which no program of dir is attached to any more and
// which held no process; one may have been removed meanwhile. RemoveDead
// does not remove them: the caller made them.
//
// A pin in dir that is neither a link nor a map is an error (it may tie a
// cgroup that cannot be known), and so is a cgroup outside this process's
// mount namespace; nothing is removed then. A dir that does not exist is
// not an error.
func RemoveDead(dir string) (cgroups []string, err error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	cgroups, err = linkedCgroups(dir)
	if err != nil {
		return nil, fmt.Errorf("cgroupbpf: %s: %w; the programs stay attached", dir, err)
	}
	for _, cg := range cgroups {
		populated, err := cgroupPopulated(cg)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cgroupbpf: %s: the cgroup of the pinned programs: %w; the programs stay attached", dir, err)
		}
		if populated {
			return nil, fmt.Errorf("cgroupbpf: %s: %w: %s still has processes, so the programs stay attached; "+
				"kill those processes (write 1 to %s/cgroup.kill) first", dir, ErrInUse, cg, cg)
		}
	}
	if err := RemovePinned(dir); err != nil {
		return nil, err
	}
	return cgroups, nil
}

// linkedCgroups lists the cgroup2 directories that the links pinned in
// dir are attached to. A link whose cgroup is gone has none.
func linkedCgroups(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	root := "" // the cgroup2 mount, read once a link has a cgroup
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
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
		if root == "" {
			if root, err = cgroup2Root(); err != nil {
				return nil, err
			}
		}
		cgDir, err := cgroupByID(root, cg.CgroupId)
		if errors.Is(err, unix.ESTALE) || errors.Is(err, unix.ENOENT) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("the cgroup of pinned link %s: %w", path, err)
		}
		if !slices.Contains(out, cgDir) {
			out = append(out, cgDir)
		}
	}
	return out, nil
}
