package s3test

import "syscall"

// sysProcAttr kills the server if the test binary dies without cleaning up
// (a panic or a -timeout), so no gateway outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
