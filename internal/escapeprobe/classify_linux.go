//go:build linux

package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// errnoName is the symbolic name of an errno ("EPERM"), or its number.
func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return "errno" + strconv.Itoa(int(e))
}

// filtered classifies a call the seccomp filter must deny: success, or any
// errno other than EPERM (what the filter and the kernel's capability checks
// return) and ENOSYS (the call does not exist), means the call reached the
// syscall's body: ESCAPED. Arguments are chosen so that reaching the body
// is harmless (invalid flags, magic numbers, clock values or paths).
func filtered(name string, err error) attempt {
	if err == nil {
		return attempt{name, Escaped, "ok"}
	}
	var e syscall.Errno
	if !errors.As(err, &e) {
		return attempt{name, Errored, err.Error()}
	}
	switch e {
	case unix.EPERM, unix.ENOSYS:
		return attempt{name, Blocked, errnoName(e)}
	}
	return attempt{name, Escaped, errnoName(e) + "(reached-kernel)"}
}

// denied classifies an operation any error stops: success is ESCAPED,
// an errno is BLOCKED, any other error (the probe's own) is ERROR.
func denied(name string, err error) attempt {
	if err == nil {
		return attempt{name, Escaped, "ok"}
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return attempt{name, Blocked, errnoName(e)}
	}
	return attempt{name, Errored, err.Error()}
}

// allowed classifies an operation that must work (write-allowed).
func allowed(name string, err error) attempt {
	if err == nil {
		return attempt{name, OK, "ok"}
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return attempt{name, Denied, errnoName(e)}
	}
	return attempt{name, Denied, err.Error()}
}

func errorAttempt(name string, err error) attempt {
	return attempt{name, Errored, err.Error()}
}

// errnoOf returns a raw syscall's error as an error (nil for 0).
func errnoOf(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// procStatus returns the fields of /proc/<pid>/status ("self" for pid 0).
func procStatus(pid int) (map[string]string, error) {
	p := "/proc/self/status"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// initialPidNS reports whether the probe runs in the machine's first pid
// namespace, i.e. on the host itself. Checks that would touch pid 1, the
// parent, or every process's environment refuse to run there: on a host
// they would poke at processes that are not the test's.
func initialPidNS() bool {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return false
	}
	const procPidInitIno = 0xEFFFFFFC // PROC_PID_INIT_INO
	return st.Ino == procPidInitIno
}

var errHostPidNS = errors.New("refusing to touch other processes from the initial pid namespace (host); run the probe in its own pid namespace")

// guardHost returns an ERROR attempt when the probe runs on the host.
func guardHost(name string) (attempt, bool) {
	if initialPidNS() {
		return errorAttempt(name, errHostPidNS), true
	}
	return attempt{}, false
}
