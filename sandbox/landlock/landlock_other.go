//go:build !linux

package landlock

import "fmt"

// Supported reports that Landlock exists only on Linux.
func Supported() (abi int, err error) {
	return 0, fmt.Errorf("landlock: %w: not Linux", ErrNotSupported)
}

// Restrict fails: Landlock exists only on Linux.
func Restrict(rules []Rule) error {
	for _, r := range rules {
		if err := r.validate(); err != nil {
			return err
		}
	}
	return fmt.Errorf("landlock: %w: not Linux", ErrNotSupported)
}
