//go:build linux

package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// nsKinds are the namespace types other than user, with their clone flags.
var nsKinds = []struct {
	name string
	flag uintptr
}{
	{"mnt", unix.CLONE_NEWNS},
	{"uts", unix.CLONE_NEWUTS},
	{"ipc", unix.CLONE_NEWIPC},
	{"net", unix.CLONE_NEWNET},
	{"pid", unix.CLONE_NEWPID},
	{"cgroup", unix.CLONE_NEWCGROUP},
	{"time", unix.CLONE_NEWTIME},
}

// checkUnshareUser: unshare(CLONE_NEWUSER), done in a forked child (Go's
// SysProcAttr.Unshareflags) because a threaded process cannot.
func checkUnshareUser(*options) []attempt {
	return []attempt{spawned("user", spawn(&syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWUSER}))}
}

// checkUnshare: unshare of every other namespace type, each in a child.
func checkUnshare(*options) []attempt {
	atts := make([]attempt, 0, len(nsKinds))
	for _, k := range nsKinds {
		atts = append(atts, spawned(k.name, spawn(&syscall.SysProcAttr{Unshareflags: k.flag})))
	}
	return atts
}

// checkCloneUser: clone(CLONE_NEWUSER) (Go's SysProcAttr.Cloneflags is the
// raw clone flag argument), and clone3 with CLONE_NEWUSER (Go uses clone3
// when CLONE_NEWTIME is asked for).
func checkCloneUser(*options) []attempt {
	return []attempt{
		spawned("clone", spawn(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER})),
		spawned("clone3", spawn(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWTIME})),
	}
}

// checkClone: clone with each other namespace flag (time through clone3).
func checkClone(*options) []attempt {
	atts := make([]attempt, 0, len(nsKinds))
	for _, k := range nsKinds {
		atts = append(atts, spawned(k.name, spawn(&syscall.SysProcAttr{Cloneflags: k.flag})))
	}
	return atts
}

var nsFiles = []string{"mnt", "pid", "net", "uts", "ipc", "user", "cgroup", "time"}

// checkSetns: setns into each namespace of pid 1 (the sandbox's init).
func checkSetns(*options) []attempt {
	if a, refused := guardHost("setns"); refused {
		return []attempt{a}
	}
	return setnsInto("/proc/1")
}

// checkSetnsHost: the -host-pid process must be invisible, and so its
// namespace files; setns into any that opens.
func checkSetnsHost(o *options) []attempt {
	dir := "/proc/" + itoa(o.hostPid)
	var atts []attempt
	if _, err := os.Lstat(dir); err == nil {
		atts = append(atts, attempt{"visible", Escaped, dir + "-exists"})
	} else {
		atts = append(atts, attempt{"visible", Blocked, errText(err)})
	}
	return append(atts, setnsInto(dir)...)
}

// setnsInto opens dir/ns/* and calls setns on each that opens, on a
// throwaway thread. An open that fails is BLOCKED; setns is classified
// like filtered (EINVAL, e.g. joining one's own user namespace or a mount
// namespace from a threaded process, still means it reached the kernel).
func setnsInto(dir string) []attempt {
	atts := make([]attempt, 0, len(nsFiles))
	for _, ns := range nsFiles {
		fd, err := unix.Open(dir+"/ns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			atts = append(atts, attempt{ns, Blocked, "open:" + errText(err)})
			continue
		}
		err = onThrowawayThread(func() error { return unix.Setns(fd, 0) })
		unix.Close(fd)
		atts = append(atts, filtered(ns, err))
	}
	return atts
}
