//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procSysFiles are sysctls that matter outside a sandbox.
var procSysFiles = []string{
	"/proc/sys/kernel/core_pattern",
	"/proc/sys/kernel/modprobe",
	"/proc/sys/kernel/sysrq",
	"/proc/sys/kernel/randomize_va_space",
	"/proc/sys/net/ipv4/ip_forward",
	"/proc/sys/vm/drop_caches",
	"/proc/sys/fs/binfmt_misc/register",
}

// openForWrite opens path write-only and closes it without writing: a file
// that opens for writing is ESCAPED, one that is absent or refused is
// BLOCKED. Nothing is ever written to these files.
func openForWrite(path string) attempt {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err == nil {
		unix.Close(fd)
		return attempt{path, Escaped, "opened-for-write"}
	}
	if err == unix.ENOENT {
		return attempt{path, Blocked, "absent"}
	}
	return denied(path, err)
}

// checkProcSys opens each of procSysFiles for writing (never writes).
func checkProcSys(*options) []attempt {
	atts := make([]attempt, 0, len(procSysFiles))
	for _, p := range procSysFiles {
		atts = append(atts, openForWrite(p))
	}
	return atts
}

// checkSysrq opens /proc/sysrq-trigger for writing (never writes).
func checkSysrq(*options) []attempt {
	return []attempt{openForWrite("/proc/sysrq-trigger")}
}

// checkSysWrite opens sysfs files for writing (never writes): the uevent
// helper, cgroup v1 release agents and cgroup.procs files, power state and
// transparent huge pages.
func checkSysWrite(*options) []attempt {
	paths := []string{
		"/sys/kernel/uevent_helper",
		"/sys/power/state",
		"/sys/kernel/mm/transparent_hugepage/enabled",
		"/sys/fs/cgroup/cgroup.procs",
	}
	for _, g := range []string{"/sys/fs/cgroup/*/release_agent", "/sys/fs/cgroup/*/cgroup.procs"} {
		m, _ := filepath.Glob(g)
		paths = append(paths, m...)
	}
	atts := make([]attempt, 0, len(paths))
	for _, p := range paths {
		atts = append(atts, openForWrite(p))
	}
	return atts
}

// checkEnviron looks for each -secret in the probe's own environment and
// in /proc/*/environ of every visible process (pid 1, the parent...). It
// never prints what it reads.
func checkEnviron(o *options) []attempt {
	own := attempt{"own-environment", Blocked, "absent"}
	for _, s := range o.secrets {
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, s.name+"=") || strings.Contains(kv, s.value) {
				own = attempt{"own-environment", Escaped, "found:" + s.name}
			}
		}
	}
	atts := []attempt{own}
	if a, refused := guardHost("proc-environ"); refused {
		return append(atts, a)
	}
	var found []string
	scanned, unreadable := 0, 0
	for _, pid := range visiblePids() {
		p := "/proc/" + strconv.Itoa(pid) + "/environ"
		b, err := os.ReadFile(p)
		if err != nil {
			unreadable++
			continue
		}
		scanned++
		for _, s := range o.secrets {
			if bytes.Contains(b, []byte(s.value)) {
				found = append(found, p)
				break
			}
		}
	}
	detail := "scanned=" + itoa(scanned) + ",unreadable=" + itoa(unreadable)
	if len(found) > 0 {
		return append(atts, attempt{"proc-environ", Escaped, "found-in=" + strings.Join(found, ",") + "," + detail})
	}
	return append(atts, attempt{"proc-environ", Blocked, detail})
}

// visiblePids lists the numeric entries of /proc, sorted.
func visiblePids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, n)
		}
	}
	sort.Ints(pids)
	return pids
}

// checkSecretFile: every -secret-file must be absent.
func checkSecretFile(o *options) []attempt {
	atts := make([]attempt, 0, len(o.secretFiles))
	for _, p := range o.secretFiles {
		if _, err := os.Lstat(p); err == nil {
			atts = append(atts, attempt{p, Escaped, "exists"})
		} else {
			atts = append(atts, attempt{p, Blocked, errText(err)})
		}
	}
	return atts
}

// checkProcs lists the visible processes (reported, not judged), and
// reports ESCAPED when the -host-pid is visible or when /proc belongs to
// an outer pid namespace (NSpid in /proc/self/status has more than one
// field: the probe sees itself under a pid of an ancestor namespace).
func checkProcs(o *options) []attempt {
	pids := visiblePids()
	list := make([]string, 0, len(pids))
	for i, p := range pids {
		if i == 64 {
			list = append(list, "...")
			break
		}
		list = append(list, strconv.Itoa(p))
	}
	atts := []attempt{{"list", Blocked, "n=" + itoa(len(pids)) + ":" + strings.Join(list, ",")}}
	if o.hostPid > 0 {
		dir := "/proc/" + itoa(o.hostPid)
		if _, err := os.Lstat(dir); err == nil {
			atts = append(atts, attempt{"host-pid", Escaped, dir + "-visible"})
		} else {
			atts = append(atts, attempt{"host-pid", Blocked, errText(err)})
		}
	}
	st, err := procStatus(0)
	if err != nil {
		return append(atts, errorAttempt("nspid", err))
	}
	ns := strings.Fields(st["NSpid"])
	if len(ns) > 1 {
		atts = append(atts, attempt{"nspid", Escaped, "outer-pid-namespace:" + strings.Join(ns, "/")})
	} else {
		atts = append(atts, attempt{"nspid", Blocked, strings.Join(ns, "/")})
	}
	return atts
}

// checkKill: kill(host-pid, 0) and pidfd_open(host-pid) must fail with
// ESRCH; EPERM means a process with that pid is visible.
func checkKill(o *options) []attempt {
	visible := func(name string, err error) attempt {
		switch err {
		case nil:
			return attempt{name, Escaped, "ok"}
		case unix.ESRCH:
			return attempt{name, Blocked, "ESRCH"}
		}
		return attempt{name, Escaped, errText(err) + "(pid-exists)"}
	}
	atts := []attempt{visible("kill0", unix.Kill(o.hostPid, 0))}
	fd, err := unix.PidfdOpen(o.hostPid, 0)
	if err == nil {
		unix.Close(fd)
	}
	return append(atts, visible("pidfd_open", err))
}

// checkCaps: every capability set of the probe must be empty.
func checkCaps(*options) []attempt {
	st, err := procStatus(0)
	if err != nil {
		return []attempt{errorAttempt("status", err)}
	}
	var atts []attempt
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		v, err := strconv.ParseUint(st[k], 16, 64)
		switch {
		case err != nil:
			atts = append(atts, attempt{k, Errored, "unparsable:" + token(st[k])})
		case v != 0:
			atts = append(atts, attempt{k, Escaped, "0x" + st[k]})
		default:
			atts = append(atts, attempt{k, Blocked, "0"})
		}
	}
	return atts
}

// checkConfined: the probe must run under a seccomp filter (Seccomp: 2)
// with no_new_privs (NoNewPrivs: 1).
func checkConfined(*options) []attempt {
	st, err := procStatus(0)
	if err != nil {
		return []attempt{errorAttempt("status", err)}
	}
	want := func(k, v string) attempt {
		if st[k] == v {
			return attempt{k, Blocked, st[k]}
		}
		return attempt{k, Escaped, token(st[k])}
	}
	return []attempt{want("Seccomp", "2"), want("NoNewPrivs", "1")}
}
