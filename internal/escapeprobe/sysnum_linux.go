//go:build linux && !386

package main

import "golang.org/x/sys/unix"

const sysKexecFileLoad = unix.SYS_KEXEC_FILE_LOAD
