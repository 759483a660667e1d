package seccomp

import (
	"errors"
	"fmt"
)

// ErrNotSupported is returned (wrapped) when seccomp filters cannot be
// installed here: a kernel without seccomp filters, the
// SECCOMP_RET_KILL_PROCESS action or SECCOMP_FILTER_FLAG_TSYNC, or an OS or
// architecture the filter is not written for (it covers only linux/amd64).
var ErrNotSupported = errors.New("seccomp filters are not supported here")

// ErrThreadSync matches a *ThreadSyncError through errors.Is.
var ErrThreadSync = errors.New("seccomp filter could not be applied to every thread")

// ThreadSyncError reports that the kernel refused to apply the filter to all
// threads of the process (SECCOMP_FILTER_FLAG_TSYNC): thread TID already runs
// under a seccomp filter that the calling thread's filters do not include.
// No thread received the filter.
type ThreadSyncError struct {
	// TID is the thread the kernel could not synchronise.
	TID int
}

func (e *ThreadSyncError) Error() string {
	return fmt.Sprintf("seccomp: thread %d has its own seccomp filter, so the filter cannot be applied to every thread; "+
		"install the filter before anything else in the process installs one", e.TID)
}

// Is reports whether target is ErrThreadSync.
func (e *ThreadSyncError) Is(target error) bool { return target == ErrThreadSync }
