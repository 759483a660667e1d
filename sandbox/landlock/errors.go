package landlock

import "errors"

var (
	// ErrNotSupported: the kernel cannot apply Landlock here (not built in,
	// disabled at boot, or not Linux). Restrict never degrades to running
	// unconfined: it returns an error wrapping this one.
	ErrNotSupported = errors.New("landlock not supported")
	// ErrInvalid: a rule is malformed (empty or relative path) or its path
	// cannot be opened.
	ErrInvalid = errors.New("invalid landlock rule")
)
