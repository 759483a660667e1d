package cgroups

import (
	"fmt"
	"math"
	"time"
)

// Minimums below which a limit is refused: a smaller one would not let a
// process start, and is almost certainly a unit mistake.
const (
	// MinMemoryBytes is the smallest memory limit accepted: 1 MiB.
	MinMemoryBytes = 1 << 20
	// MinCPUs is the smallest CPU limit accepted: 0.01 CPU, the kernel's
	// 1 ms CFS quota over a 100 ms period.
	MinCPUs = 0.01

	// cpuPeriodUs is the CFS period the CPU limit is expressed over.
	cpuPeriodUs = 100000
)

// Limits are a sandbox's resource limits. The zero value means no limit at
// all; each zero field means no limit of that kind.
type Limits struct {
	// MemoryBytes caps the group's memory (anonymous memory, page cache and
	// kernel memory charged to it), in bytes, swap included: when it is
	// reached and nothing can be reclaimed, the kernel OOM-kills a process
	// of the group. 0 (default) = no limit; otherwise at least
	// MinMemoryBytes.
	MemoryBytes int64
	// Pids caps the number of processes and threads in the group; a fork
	// or clone beyond it fails with EAGAIN. 0 (default) = no limit.
	Pids int64
	// CPUs caps CPU time, in CPUs (1.5 = one and a half CPUs' worth of time
	// per period), enforced by CFS bandwidth control over a 100 ms period.
	// 0 (default) = no limit; otherwise at least MinCPUs.
	CPUs float64
}

// Validate reports whether the limits are in range; the error wraps
// ErrInvalid.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0:
		return fmt.Errorf("cgroups: memory limit %d bytes is negative (0 means no limit): %w", l.MemoryBytes, ErrInvalid)
	case l.MemoryBytes > 0 && l.MemoryBytes < MinMemoryBytes:
		return fmt.Errorf("cgroups: memory limit %d bytes is below the minimum of 1 MiB (%d bytes); was a unit missing?: %w",
			l.MemoryBytes, MinMemoryBytes, ErrInvalid)
	case l.Pids < 0:
		return fmt.Errorf("cgroups: pids limit %d is negative (0 means no limit): %w", l.Pids, ErrInvalid)
	case math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		return fmt.Errorf("cgroups: CPU limit %v is not a number of CPUs: %w", l.CPUs, ErrInvalid)
	case l.CPUs < 0:
		return fmt.Errorf("cgroups: CPU limit %v is negative (0 means no limit): %w", l.CPUs, ErrInvalid)
	case l.CPUs > 0 && l.CPUs < MinCPUs:
		return fmt.Errorf("cgroups: CPU limit %v is below the minimum of %v CPUs: %w", l.CPUs, MinCPUs, ErrInvalid)
	case l.CPUs > 1e6:
		return fmt.Errorf("cgroups: CPU limit %v is out of range: %w", l.CPUs, ErrInvalid)
	}
	return nil
}

// cpuQuotaUs is the CFS quota for l.CPUs over cpuPeriodUs.
func (l Limits) cpuQuotaUs() int64 {
	return int64(math.Round(l.CPUs * cpuPeriodUs))
}

// Stats are a group's resource accounting. A field the machine does not
// account (its controller is not in use for the group, or the kernel lacks
// the file) is zero.
type Stats struct {
	// MemoryPeak is the highest memory use seen, in bytes (v1
	// memory.max_usage_in_bytes, v2 memory.peak). It may pass the limit by
	// a page or so: the kernel charges before it reclaims or kills.
	MemoryPeak int64
	// MemoryLimitHits counts the times memory use hit the limit (v1
	// memory.failcnt plus memory.memsw.failcnt, v2 the "max" count of
	// memory.events). Some kernels do not count on v1 (Linux 6.18 leaves
	// failcnt at 0 even when the limit OOM-kills): use OOMKills to tell
	// whether the limit ended a process.
	MemoryLimitHits int64
	// OOMKills counts the processes the OOM killer killed in the group (v1
	// memory.oom_control oom_kill, v2 memory.events oom_kill).
	OOMKills int64
	// PidsPeak is the highest number of processes and threads seen
	// (pids.peak).
	PidsPeak int64
	// PidsLimitHits counts the forks refused by the pids limit (pids.events
	// max).
	PidsLimitHits int64
	// CPUUsage is the CPU time the group consumed (v2 cpu.stat usage_usec,
	// else v1 cpuacct.usage where cpuacct shares the cpu hierarchy).
	CPUUsage time.Duration
	// CPUThrottled is the time the group was held back by the CPU limit
	// (v2 cpu.stat throttled_usec, v1 cpu.stat throttled_time).
	CPUThrottled time.Duration
}
