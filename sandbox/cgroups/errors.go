package cgroups

import "errors"

var (
	// ErrNotSupported: a limit or feature that was asked for cannot be
	// provided on this machine (no hierarchy has the controller, cgroup2 is
	// not mounted, the controller cannot be delegated, not Linux). Create
	// fails closed with an error wrapping it rather than run without the
	// limit.
	ErrNotSupported = errors.New("cgroup feature not supported")
	// ErrInvalid: a limit or group name is malformed or out of range.
	ErrInvalid = errors.New("invalid cgroup argument")
	// ErrExist: a group of that name already exists and still has processes
	// (or child groups) in it.
	ErrExist = errors.New("cgroup already exists")
	// ErrClosed: the group was used after Close.
	ErrClosed = errors.New("cgroup closed")
)
