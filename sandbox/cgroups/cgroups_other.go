//go:build !linux

package cgroups

import (
	"fmt"
	"time"
)

// ParentDir is the directory, beneath this process's own cgroup in each
// hierarchy, that holds the groups Create makes.
const ParentDir = "cairn"

var errNotLinux = fmt.Errorf("cgroups: %w: not Linux", ErrNotSupported)

// Group is a sandbox's cgroup; cgroups exist only on Linux.
type Group struct{}

// Create fails: cgroups exist only on Linux.
func Create(name string, l Limits) (*Group, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return nil, errNotLinux
}

// Sweep fails: cgroups exist only on Linux.
func Sweep(minAge time.Duration) (int, error) { return 0, errNotLinux }

// Add fails: cgroups exist only on Linux.
func (g *Group) Add(pid int) error { return errNotLinux }

// FD fails: cgroups exist only on Linux.
func (g *Group) FD() (int, error) { return -1, errNotLinux }

// Path returns "".
func (g *Group) Path() string { return "" }

// Kill fails: cgroups exist only on Linux.
func (g *Group) Kill() error { return errNotLinux }

// Stats returns zero Stats.
func (g *Group) Stats() Stats { return Stats{} }

// Close does nothing.
func (g *Group) Close() error { return nil }
