//go:build !linux

package cgroupbpf

// RemoveDead returns an error wrapping ErrNotSupported: not Linux.
func RemoveDead(dir string) (cgroups []string, err error) { return nil, errOS }
