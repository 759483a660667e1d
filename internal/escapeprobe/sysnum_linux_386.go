//go:build linux

package main

// sysKexecFileLoad: linux/386 has no kexec_file_load; -1 answers ENOSYS.
const sysKexecFileLoad = ^uintptr(0)
