//go:build !linux

package journal

import "os"

func punchHole(*os.File, int64, int64) error { return ErrNotSupported }

func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
