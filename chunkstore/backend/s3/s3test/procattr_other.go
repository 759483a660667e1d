//go:build !linux

package s3test

import "syscall"

// sysProcAttr has no parent-death signal to set outside Linux.
func sysProcAttr() *syscall.SysProcAttr { return nil }
