package fuseuring

import "errors"

// ErrNotSupported: this kernel, or its fuse module's enable_uring
// parameter, offers no FUSE over io_uring (or the platform is not Linux).
var ErrNotSupported = errors.New("FUSE over io_uring is not supported")
