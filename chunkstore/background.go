package chunkstore

import "runtime"

// Background work. A mount keeps serving while its snapshot chunks,
// hashes, compresses and uploads: on a machine of few cores that work
// would otherwise take the processors the requests need, and every
// request would wait its turn behind chunks (issue 16: a 1 GiB snapshot
// made requests wait up to a few hundred ms). So the store's chunk workers
// and uploaders, and whatever a caller runs with RunBackground (the
// journal's snapshot walk, which reads and chunks files), run on OS
// threads of their own at a lower CPU priority (BackgroundNice): the
// kernel runs a request's thread first, and the background work takes
// whatever CPU is left, all of it on an idle machine. Those threads hold
// Go processors (Ps) while they run, so a process serving requests
// meanwhile needs Ps beyond them: BackgroundThreads says how many (the
// daemon adds them to GOMAXPROCS).

// BackgroundNice is the nice value added to background threads (Linux,
// where the process may set it back; elsewhere they keep the process's
// priority).
const BackgroundNice = 10

// BackgroundThreads is how many OS threads at most run background work
// at once in a store opened with workers chunk workers (Options.Workers):
// the workers, a caller's walk (RunBackground) and the busy uploaders
// (which are mostly in system calls, holding no P).
func BackgroundThreads(workers int) int { return workers + 1 }

// DefaultWorkers is the default of Options.Workers: one chunk worker per
// core GOMAXPROCS allows, at most one per CPU of the machine (a daemon
// raises GOMAXPROCS above its cores for its background threads).
func DefaultWorkers() int { return max(1, min(runtime.GOMAXPROCS(0), runtime.NumCPU())) }

// RunBackground runs fn on an OS thread at the background priority, and
// returns when fn does.
func RunBackground(fn func()) {
	restore := lowerPriority()
	defer restore()
	fn()
}

// lowerPriority locks the calling goroutine to its OS thread and lowers
// that thread's CPU priority by BackgroundNice; restore sets it back and
// unlocks. The thread is never handed back to the Go runtime at the lower
// priority, nor ended (a thread's end would kill the children it started
// with a parent-death signal): where the process could not raise the
// priority back (no CAP_SYS_NICE, RLIMIT_NICE), it is not lowered.
func lowerPriority() (restore func()) {
	runtime.LockOSThread()
	old, ok := setThreadNice(BackgroundNice)
	if !ok {
		runtime.UnlockOSThread()
		return func() {}
	}
	return func() {
		if resetThreadNice(old) {
			runtime.UnlockOSThread()
		}
		// Else (it cannot happen: setThreadNice checked) the thread ends
		// with its goroutine.
	}
}
