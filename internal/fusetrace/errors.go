package fusetrace

import "errors"

// ErrNotSupported: the kernel has no fuse tracepoints (before 6.15), no BPF
// for tracepoints, or this is not Linux. Open wraps it.
var ErrNotSupported = errors.New("FUSE request tracing not supported")
