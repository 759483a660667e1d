//go:build !linux || !amd64

package seccomp

import (
	"fmt"
	"runtime"
)

// Install fails with ErrNotSupported: the filter is written for the x86_64
// and i386 system call ABIs of Linux, so it exists only on linux/amd64.
func Install() error { return Supported() }

// Supported fails with ErrNotSupported outside linux/amd64.
func Supported() error {
	return fmt.Errorf("%w: the filter covers linux/amd64 only, this is %s/%s", ErrNotSupported, runtime.GOOS, runtime.GOARCH)
}
