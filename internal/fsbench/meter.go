package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/fusetrace"
)

// userHZ is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100
// on every Linux architecture Go supports).
const userHZ = 100

// procCPU returns the user plus system time of process pid, all its
// threads, exited ones included (/proc/PID/stat utime + stime).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from the text of
// /proc/PID/stat, whose second field (comm) may hold spaces and ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no ')' in %q", b)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after comm, want 13 or more", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: utime/stime %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// meter measures the timed part of one workload on one target: wall
// time, and for a FUSE target the server's CPU time and the requests the
// kernel sent it. A workload calls start and stop around what it times.
type meter struct {
	t   *target
	ctr *fusetrace.Counter // nil: requests are not counted

	t0   time.Time
	cpu0 time.Duration
	c0   fusetrace.Counts

	elapsed time.Duration
	cpu     time.Duration
	reqs    fusetrace.Counts
	err     error // of reading the server's CPU or the counts
}

func (m *meter) start() {
	m.cpu0, m.c0 = m.read()
	m.t0 = time.Now()
}

// stop ends the measurement and returns the wall time since start.
func (m *meter) stop() time.Duration {
	m.elapsed = time.Since(m.t0)
	cpu, c := m.read()
	m.cpu = cpu - m.cpu0
	m.reqs = c.Sub(m.c0)
	return m.elapsed
}

func (m *meter) read() (time.Duration, fusetrace.Counts) {
	var cpu time.Duration
	var c fusetrace.Counts
	var err error
	if m.t.pid > 0 {
		if cpu, err = procCPU(m.t.pid); err != nil && m.err == nil {
			m.err = fmt.Errorf("server CPU of %s: %w", m.t.name, err)
		}
	}
	if m.ctr != nil && m.t.fuse {
		if c, err = m.ctr.Counts(m.t.dev); err != nil && m.err == nil {
			m.err = err
		}
	}
	return cpu, c
}
