package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// killTimeout bounds how long Kill waits for the group to empty. Only a
	// process stuck in the kernel (uninterruptible sleep, e.g. on a hung
	// FUSE request) outlives SIGKILL that long.
	killTimeout = 10 * time.Second
	// rmdirTimeout bounds how long Close retries removing a directory the
	// kernel still reports busy.
	rmdirTimeout = 2 * time.Second
	// maxPoll is the longest pause between two checks while waiting.
	maxPoll = 50 * time.Millisecond
)

// Kill ends every process of the group and waits until none is left: it
// writes 1 to cgroup.kill in the cgroup2 directory (Linux 5.14+: the kernel
// SIGKILLs the whole tree at once, including processes that double-forked
// or called setsid, and new forks fail meanwhile), then SIGKILLs any process
// still listed in the cgroup.procs of any directory (the only means on v1,
// and the fallback on older kernels) until every cgroup.procs is empty, for
// at most 10 seconds. Zombies are not listed: the caller may reap its own
// child after Kill returns. Kill on a closed group does nothing.
func (g *Group) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	return g.kill()
}

func (g *Group) kill() error {
	var killErr error
	if g.v2Dir != "" {
		err := writeFile(filepath.Join(g.v2Dir, "cgroup.kill"), "1")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			killErr = err // still try one process at a time below
		}
	}
	deadline := time.Now().Add(killTimeout)
	for delay := time.Millisecond; ; delay = min(2*delay, maxPoll) {
		left, err := g.signalMembers()
		if err != nil {
			return errors.Join(killErr, err)
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(killErr, fmt.Errorf("cgroups: %d processes of group %s still alive %v after SIGKILL (pids %v): "+
				"stuck in the kernel, e.g. on a hung FUSE request", len(left), g.name, killTimeout, left))
		}
		time.Sleep(delay)
	}
}

// members lists the processes in any of the group's directories.
func (g *Group) members() ([]int, error) {
	var all []int
	for _, d := range g.dirs {
		pids, err := readPids(d)
		if err != nil {
			return nil, err
		}
		for _, p := range pids {
			if !slices.Contains(all, p) {
				all = append(all, p)
			}
		}
	}
	return all, nil
}

// signalMembers SIGKILLs every process in the group and returns the ones it
// found. A pid is pinned with a pidfd and signalled only if, once pinned, it
// is still listed: a process that left the group and died between the
// listing and the pidfd may have passed its pid on to an outsider.
func (g *Group) signalMembers() ([]int, error) {
	pids, err := g.members()
	if err != nil || len(pids) == 0 {
		return pids, err
	}
	fds := make(map[int]int, len(pids))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	noPidfd := false
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			fds[pid] = fd
		case errors.Is(err, unix.ENOSYS):
			noPidfd = true // before Linux 5.3: plain kill, a smaller race
		}
		// ESRCH: gone already.
	}
	still, err := g.members()
	if err != nil {
		return nil, err
	}
	for _, pid := range still {
		if fd, ok := fds[pid]; ok {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		} else if noPidfd {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
	return pids, nil
}

// rmdirWait removes a cgroup directory, retrying while the kernel reports
// it busy (tasks still exiting). A directory already gone is not an error.
func rmdirWait(dir string) error {
	deadline := time.Now().Add(rmdirTimeout)
	for delay := time.Millisecond; ; delay = min(2*delay, maxPoll) {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("cgroups: remove %s: %w", dir, err)
		}
		time.Sleep(delay)
	}
}
