package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Sweep removes groups left behind by crashed runs: every directory in
// ParentDir, beneath this process's cgroup in the cgroup2 hierarchy and in
// the v1 memory, pids and cpu hierarchies, that is older than minAge and has
// neither processes nor child groups. It returns how many directories it
// removed. minAge protects a group another process has just created and not
// yet put a process in: use a minute or more.
func Sweep(minAge time.Duration) (int, error) {
	lay, err := readLayout()
	if err != nil {
		return 0, err
	}
	var bases []string
	if lay.v2 != nil {
		bases = append(bases, lay.v2.dir)
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if h := lay.v1[c]; h != nil && !slices.Contains(bases, h.dir) {
			bases = append(bases, h.dir)
		}
	}
	removed := 0
	var errs []error
	for _, base := range bases {
		parent := filepath.Join(base, ParentDir)
		entries, err := os.ReadDir(parent)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroups: sweep: %w", err))
			continue
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			info, err := e.Info()
			if err != nil || time.Since(info.ModTime()) < minAge {
				continue
			}
			if pids, err := readPids(dir); err != nil || len(pids) > 0 {
				continue
			}
			// Fails (EBUSY, ENOTEMPTY) for a group that is in use after all.
			if unix.Rmdir(dir) == nil {
				removed++
			}
		}
		unix.Rmdir(parent) // only if empty
	}
	return removed, errors.Join(errs...)
}
