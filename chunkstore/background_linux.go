package chunkstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// On Linux a thread ID given to setpriority(PRIO_PROCESS) names that
// thread alone. The raw getpriority returns 20 - nice (glibc converts it;
// x/sys/unix does not).

// setThreadNice adds inc to the calling thread's nice value and reports
// whether it did, and the value before: only if resetThreadNice can set it
// back (root, or an RLIMIT_NICE that allows the thread's current value).
func setThreadNice(inc int) (old int, ok bool) {
	tid := unix.Gettid()
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, false
	}
	cur := 20 - raw
	if os.Geteuid() != 0 {
		var lim unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NICE, &lim) != nil || 20-int64(lim.Cur) > int64(cur) {
			return 0, false
		}
	}
	if unix.Setpriority(unix.PRIO_PROCESS, tid, min(cur+inc, 19)) != nil {
		return 0, false
	}
	return cur, true
}

// resetThreadNice sets the calling thread's nice value back to old.
func resetThreadNice(old int) bool {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), old) == nil
}

// threadNice returns the calling thread's nice value (for tests).
func threadNice() (int, error) {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	return 20 - raw, err
}
