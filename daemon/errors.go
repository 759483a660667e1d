package daemon

import "errors"

var (
	// ErrNotMounted: no daemon serves the workspace or mount point.
	ErrNotMounted = errors.New("not mounted")
	// ErrBusy: the mount point or the workspace is in use.
	ErrBusy = errors.New("busy")
	// ErrStale: a mount or record whose daemon is gone.
	ErrStale = errors.New("stale mount")
)
