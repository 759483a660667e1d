package fs

import "errors"

// ErrInvalid: Options that cannot work (Options.Validate).
var ErrInvalid = errors.New("invalid options")
