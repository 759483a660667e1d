package cgroups

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Stats returns the group's resource accounting; after Close, the figures
// Close recorded just before removing the directories. Values the machine
// does not account are zero (see Stats' fields).
func (g *Group) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return g.final
	}
	return g.readStats()
}

func (g *Group) readStats() Stats {
	var s Stats
	if dir, ok := g.ctlDir["memory"]; ok {
		if g.ctlV2["memory"] {
			s.MemoryPeak = readInt(dir, "memory.peak")
			ev := readKeyed(dir, "memory.events")
			s.MemoryLimitHits, s.OOMKills = ev["max"], ev["oom_kill"]
		} else {
			s.MemoryPeak = readInt(dir, "memory.max_usage_in_bytes")
			// A charge is tried against memory+swap first (when swap is
			// accounted) and a failure counts only there: add both.
			s.MemoryLimitHits = readInt(dir, "memory.failcnt") + readInt(dir, "memory.memsw.failcnt")
			s.OOMKills = readKeyed(dir, "memory.oom_control")["oom_kill"]
		}
	}
	if dir, ok := g.ctlDir["pids"]; ok {
		s.PidsPeak = readInt(dir, "pids.peak")
		s.PidsLimitHits = readKeyed(dir, "pids.events")["max"]
	}
	if g.v2Dir != "" {
		// cpu.stat's usage is kept in every cgroup2 directory, with or
		// without the cpu controller.
		st := readKeyed(g.v2Dir, "cpu.stat")
		s.CPUUsage = time.Duration(st["usage_usec"]) * time.Microsecond
		s.CPUThrottled = time.Duration(st["throttled_usec"]) * time.Microsecond
	}
	if dir, ok := g.ctlDir["cpu"]; ok && !g.ctlV2["cpu"] {
		s.CPUThrottled = time.Duration(readKeyed(dir, "cpu.stat")["throttled_time"]) // ns
		if s.CPUUsage == 0 {
			s.CPUUsage = time.Duration(readInt(dir, "cpuacct.usage")) // ns, where cpuacct shares the hierarchy
		}
	}
	return s
}

// readInt reads a single-number cgroup file; 0 if missing or unreadable.
func readInt(dir, name string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// readKeyed reads a flat keyed cgroup file ("key value" lines).
func readKeyed(dir, name string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}
