//go:build linux

package main

// check is one named escape attempt (or a group of related attempts).
type check struct {
	name  string
	needs string              // the flag without which "all" skips the check ("" = none)
	has   func(*options) bool // whether that flag was given
	run   func(*options) []attempt
}

// checks lists every check in the order "all" runs them.
var checks = []check{
	{name: "mount", run: checkMount},
	{name: "mount-api", run: checkMountAPI},
	{name: "pivot-root", run: checkPivotRoot},
	{name: "chroot", run: checkChroot},
	{name: "unshare-user", run: checkUnshareUser},
	{name: "unshare", run: checkUnshare},
	{name: "clone-user", run: checkCloneUser},
	{name: "clone", run: checkClone},
	{name: "setns", run: checkSetns},
	{name: "setns-host", needs: "host-pid", has: hasHostPid, run: checkSetnsHost},
	{name: "ptrace-parent", run: checkPtraceParent},
	{name: "ptrace-init", run: checkPtraceInit},
	{name: "ptrace-traceme", run: checkPtraceTraceme},
	{name: "process-vm", run: checkProcessVM},
	{name: "bpf", run: checkBPF},
	{name: "perf", run: checkPerf},
	{name: "io-uring", run: checkIOUring},
	{name: "userfaultfd", run: checkUserfaultfd},
	{name: "keyctl", run: checkKeyctl},
	{name: "open-by-handle", run: checkOpenByHandle},
	{name: "kexec", run: checkKexec},
	{name: "module", run: checkModule},
	{name: "reboot", run: checkReboot},
	{name: "swap", run: checkSwap},
	{name: "clock", run: checkClock},
	{name: "personality", run: checkPersonality},
	{name: "int80", run: checkInt80},
	{name: "x32", run: checkX32},
	{name: "proc-sys", run: checkProcSys},
	{name: "sysrq", run: checkSysrq},
	{name: "sys-write", run: checkSysWrite},
	{name: "environ", needs: "secret", has: func(o *options) bool { return len(o.secrets) > 0 }, run: checkEnviron},
	{name: "secret-file", needs: "secret-file", has: func(o *options) bool { return len(o.secretFiles) > 0 }, run: checkSecretFile},
	{name: "procs", run: checkProcs},
	{name: "kill", needs: "host-pid", has: hasHostPid, run: checkKill},
	{name: "setuid", needs: "setuid", has: func(o *options) bool { return o.setuid != "" }, run: checkSetuid},
	{name: "caps", run: checkCaps},
	{name: "confined", run: checkConfined},
	{name: "devfuse", run: checkDevFuse},
	{name: "abstract", needs: "abstract", has: func(o *options) bool { return o.abstract != "" }, run: checkAbstract},
	{name: "unix", needs: "unix", has: func(o *options) bool { return o.unixPath != "" }, run: checkUnix},
	{name: "hostns-net", needs: "host-port", has: func(o *options) bool { return o.hostPort != 0 }, run: checkHostNet},
	{name: "write-deny", needs: "deny-write", has: func(o *options) bool { return len(o.denyWrite) > 0 }, run: checkWriteDeny},
	{name: "write-allowed", needs: "allow-write", has: func(o *options) bool { return len(o.allowWrite) > 0 }, run: checkWriteAllowed},
	{name: "tiocsti", run: checkTIOCSTI},
}

func hasHostPid(o *options) bool { return o.hostPid > 0 }

func lookupCheck(name string) (check, bool) {
	for _, c := range checks {
		if c.name == name {
			return c, true
		}
	}
	return check{}, false
}

func checkNames() []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	return names
}
