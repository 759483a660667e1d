package fs

import "errors"

// ErrInvalid: Options that cannot work (Options.Validate).
var ErrInvalid = errors.New("invalid options")

// ErrTransport: the FUSE transport asked for (Options.Transport) is not
// available here.
var ErrTransport = errors.New("FUSE transport not available")
