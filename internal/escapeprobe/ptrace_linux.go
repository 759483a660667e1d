//go:build linux

package main

import (
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkPtraceParent: PTRACE_SEIZE (then PTRACE_ATTACH) of the parent.
func checkPtraceParent(*options) []attempt {
	if a, refused := guardHost("parent"); refused {
		return []attempt{a}
	}
	ppid := os.Getppid()
	if ppid == 0 {
		return []attempt{{"parent", Blocked, "parent-outside-the-pid-namespace"}}
	}
	return ptraceTarget(ppid)
}

// checkPtraceInit: PTRACE_SEIZE (then PTRACE_ATTACH) of pid 1.
func checkPtraceInit(*options) []attempt {
	if a, refused := guardHost("init"); refused {
		return []attempt{a}
	}
	if os.Getpid() == 1 {
		return []attempt{{"init", Errored, "the-probe-is-pid-1"}}
	}
	return ptraceTarget(1)
}

// ptraceTarget tries PTRACE_SEIZE, which does not stop the target, and
// when that fails PTRACE_ATTACH (a filter may check the request). A
// successful attach is undone at once: interrupt or wait for the stop,
// then detach.
func ptraceTarget(pid int) []attempt {
	var seizeErr, attachErr error
	onThrowawayThread(func() error {
		undo := func() {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WALL, nil)
			unix.PtraceDetach(pid)
		}
		if seizeErr = unix.PtraceSeize(pid); seizeErr == nil {
			if unix.PtraceInterrupt(pid) == nil {
				undo()
			}
			return nil // a thread still tracing detaches when it exits
		}
		if attachErr = unix.PtraceAttach(pid); attachErr == nil {
			undo()
		}
		return nil
	})
	atts := []attempt{filtered("seize:"+itoa(pid), seizeErr)}
	if seizeErr != nil {
		atts = append(atts, filtered("attach:"+itoa(pid), attachErr))
	}
	return atts
}

// checkPtraceTraceme: a child that calls PTRACE_TRACEME and execs (Go's
// SysProcAttr.Ptrace); when it works the child stops at exec and is killed.
func checkPtraceTraceme(*options) []attempt {
	var err error
	onThrowawayThread(func() error {
		cmd := self("_noop")
		cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
		if err = cmd.Start(); err == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return nil
	})
	return []attempt{spawned("traceme", err)}
}

// checkProcessVM: process_vm_readv of 16 bytes at 0x400000 (a non-PIE Go
// binary's ELF header; EFAULT if unmapped, which still means the
// permission check passed) and process_vm_writev of one byte at address 0,
// which can never be mapped (vm.mmap_min_addr), from pid 1 and the parent.
func checkProcessVM(*options) []attempt {
	if a, refused := guardHost("process_vm"); refused {
		return []attempt{a}
	}
	targets := []int{1}
	if pp := os.Getppid(); pp > 1 {
		targets = append(targets, pp)
	}
	var atts []attempt
	for _, pid := range targets {
		if pid == os.Getpid() {
			continue
		}
		buf := make([]byte, 16)
		local := []unix.Iovec{{Base: &buf[0]}}
		local[0].SetLen(len(buf))
		_, err := unix.ProcessVMReadv(pid, local, []unix.RemoteIovec{{Base: 0x400000, Len: len(buf)}}, 0)
		atts = append(atts, filtered("readv:"+itoa(pid), err))
		local[0].SetLen(1)
		_, err = unix.ProcessVMWritev(pid, local, []unix.RemoteIovec{{Base: 0, Len: 1}}, 0)
		atts = append(atts, filtered("writev:"+itoa(pid), err))
		runtime.KeepAlive(buf)
	}
	return atts
}
