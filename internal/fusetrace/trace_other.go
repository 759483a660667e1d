//go:build !linux

package fusetrace

import "fmt"

// Counter is not available off Linux.
type Counter struct{}

// Open returns ErrNotSupported off Linux.
func Open() (*Counter, error) { return nil, fmt.Errorf("%w: not Linux", ErrNotSupported) }

// Counts is never reached off Linux.
func (*Counter) Counts(uint32) (Counts, error) { return Counts{}, ErrNotSupported }

// Close does nothing off Linux.
func (*Counter) Close() error { return nil }

// DevOf returns ErrNotSupported off Linux.
func DevOf(string) (uint32, error) { return 0, ErrNotSupported }
