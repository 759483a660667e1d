//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// runHelper runs the subcommands the probe runs itself with (and
// euid-report, which the setuid check runs through the setuid copy). ok is
// false when name is not one of them.
func runHelper(name string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	switch name {
	case "euid-report":
		return helperEuidReport(stdout), true
	case "_noop":
		return 0, true
	case "_int80", "_x32":
		if len(args) != 1 {
			fmt.Fprintf(stderr, "escapeprobe %s: want one call name\n", name)
			return exitError, true
		}
		return helperRaw(name == "_int80", args[0], stdout, stderr), true
	case "_chroot":
		if len(args) != 2 {
			fmt.Fprintln(stderr, "escapeprobe _chroot: want JAIL MARKER")
			return exitError, true
		}
		return helperChroot(args[0], args[1], stdout), true
	}
	return 0, false
}

// helperEuidReport prints the process's ids and capabilities, as seen by a
// setuid copy of the probe.
func helperEuidReport(w io.Writer) int {
	st, err := procStatus(0)
	if err != nil {
		fmt.Fprintf(w, "error=%v\n", err)
		return exitError
	}
	fmt.Fprintf(w, "uid=%d euid=%d capeff=%s capprm=%s\n", os.Getuid(), os.Geteuid(), st["CapEff"], st["CapPrm"])
	return 0
}

// helperChroot is the classic chroot escape, run in a child process because
// chroot changes the root of every thread: keep a directory fd outside,
// chroot into jail, fchdir to the fd, walk up with "..", chroot("."), then
// look for the host-only marker.
func helperChroot(jail, marker string, w io.Writer) int {
	out, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintf(w, "error=open_/:%v\n", err)
		return exitError
	}
	if err := unix.Chroot(jail); err != nil {
		fmt.Fprintf(w, "chroot=%s\n", errText(err))
		return 0
	}
	fmt.Fprintln(w, "chroot=ok")
	if err := unix.Fchdir(out); err != nil {
		fmt.Fprintf(w, "escape=fchdir:%s\n", errText(err))
		return 0
	}
	for i := 0; i < 64; i++ {
		if err := unix.Chdir(".."); err != nil {
			fmt.Fprintf(w, "escape=chdir:%s\n", errText(err))
			return 0
		}
	}
	if err := unix.Chroot("."); err != nil {
		fmt.Fprintf(w, "escape=%s\n", errText(err))
		return 0
	}
	fmt.Fprintln(w, "escape=ok")
	if marker != "" && marker != "-" {
		if _, err := os.Stat(marker); err != nil {
			fmt.Fprintf(w, "marker=%s\n", errText(err))
		} else {
			fmt.Fprintln(w, "marker=found")
		}
	}
	return 0
}

// errText is "ok" for nil, the errno's name for an errno, else the error.
func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return errnoName(e)
	}
	return token(err.Error())
}

// self is a command running this probe binary again.
func self(args ...string) *exec.Cmd {
	return exec.Command("/proc/self/exe", args...)
}

// childOutcome runs cmd and returns its output as key=value pairs, or an
// attempt saying how the child ended when it did not exit normally (killed
// by SIGSYS, as a seccomp filter with a kill action does, counts as
// BLOCKED).
func childOutcome(name string, cmd *exec.Cmd) (map[string]string, *attempt) {
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				if ws.Signal() == syscall.SIGSYS {
					return nil, &attempt{name, Blocked, "killed-by-SIGSYS"}
				}
				return nil, &attempt{name, Errored, "child-killed-by-" + unix.SignalName(ws.Signal())}
			}
			return nil, &attempt{name, Errored, "child-failed:" + token(strings.TrimSpace(string(out))+" "+string(ee.Stderr))}
		}
		a := errorAttempt(name, fmt.Errorf("run child: %w", err))
		return nil, &a
	}
	m := make(map[string]string)
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// spawn starts this probe as a child ("_noop") with attr and reaps it. The
// error is the one of clone, unshare or exec in the child: once Start
// returns, the namespaces were made. How the child then ends does not
// matter (after unshare(CLONE_NEWPID) a Go program cannot even start its
// threads).
func spawn(attr *syscall.SysProcAttr) error {
	cmd := self("_noop")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return err
	}
	cmd.Wait()
	return nil
}

// spawned classifies spawn's error like filtered, except that running out
// of processes or memory is the probe's problem, not an escape.
func spawned(name string, err error) attempt {
	var e syscall.Errno
	if errors.As(err, &e) && (e == unix.EAGAIN || e == unix.ENOMEM) {
		return attempt{name, Errored, errnoName(e)}
	}
	return filtered(name, err)
}

// onThrowawayThread runs fn on a locked OS thread that ends with it: calls
// that change the calling thread (setns, ptrace, personality) cannot leak
// into the rest of the probe.
func onThrowawayThread(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		ch <- fn()
	}()
	return <-ch
}

func itoa(i int) string { return strconv.Itoa(i) }
