package outbox

import "errors"

// ErrClosed: the outbox was closed; what it had queued stays on disk for
// the next Open.
var ErrClosed = errors.New("outbox closed")
