package daemon

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// LockWorkspace takes the exclusive lock of workspace ws's local state
// (Paths.Lock, flock(2)): one daemon per workspace and state directory.
// A daemon takes it before anything else, so that a refused mount touches
// nothing of the one that holds the workspace; a verb that opens the
// journal or the lease of an unmounted workspace takes it the same way.
// The lock is held while the returned file is open, and by the kernel
// until the process is gone (a killed daemon's lock is free again once it
// has exited). A workspace locked by another process is ErrBusy, saying
// which daemon has it.
func LockWorkspace(home, ws string) (*os.File, error) {
	p := PathsOf(home, ws)
	f, err := os.OpenFile(p.Lock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock workspace %q: %w", ws, err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return f, nil
	}
	f.Close()
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return nil, fmt.Errorf("lock workspace %q (%s): %w", ws, p.Lock, err)
	}
	r, rerr := ReadRecord(home, ws)
	switch {
	case rerr == nil && r.Alive():
		return nil, fmt.Errorf("%w: workspace %q is mounted at %s already (daemon pid %d); `cairn unmount %s` first", ErrBusy, ws, r.Dir, r.PID, ws)
	case rerr == nil:
		// Its daemon is dead but not ended (stuck in the kernel), or runs
		// in a pid namespace this process does not see.
		return nil, fmt.Errorf("%w: workspace %q is held by another process: its daemon (pid %d, mounted at %s) still runs, or has not ended; `cairn unmount %s` stops it or cleans it up", ErrBusy, ws, r.PID, r.Dir, ws)
	default:
		return nil, fmt.Errorf("%w: workspace %q is in use by another cairn process on this machine (a daemon starting or exiting); retry in a moment, or `cairn unmount %s`", ErrBusy, ws, ws)
	}
}

// Locked reports whether a process holds workspace ws's lock: a daemon
// serves it, starts or exits, or a killed one has not ended yet (see
// CleanStale).
func Locked(home, ws string) bool {
	f, err := os.OpenFile(PathsOf(home, ws).Lock, os.O_RDWR, 0)
	if err != nil {
		return false // no lock file: never mounted here
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
