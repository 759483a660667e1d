//go:build !linux

package fs

import (
	"errors"
	"os"
)

// WaitWriteback is Linux's only (open_by_handle_at(2)).
func WaitWriteback(mount *os.File, n KernelInode) error { return errors.ErrUnsupported }
