//go:build !linux

package journal

// diskFree is Linux only: elsewhere the journal has no space guard.
func diskFree(string) (uint64, error) { return 0, ErrNotSupported }

func allocate(string, int64, bool) error { return ErrNotSupported }
