package cdc

import "errors"

// ErrInvalidParams is wrapped by every error Params.Validate (and therefore
// NewCutter) returns. Match it with errors.Is.
var ErrInvalidParams = errors.New("invalid chunker parameters")

// errBadRead reports a Reader that returned a count outside [0, len(p)].
var errBadRead = errors.New("cdc: reader returned an invalid byte count")
