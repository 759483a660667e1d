package backend

import "errors"

var (
	// ErrNotFound: the object (or, from Open, the bucket or directory) does
	// not exist.
	ErrNotFound = errors.New("object not found")
	// ErrConflict: a conditional Put lost: the precondition (IfMatch or
	// IfNoneMatch) did not hold when the write was attempted.
	ErrConflict = errors.New("precondition failed")
	// ErrInvalidKey: the key is empty, absolute, or has an empty, "." or ".."
	// segment.
	ErrInvalidKey = errors.New("invalid object key")
	// ErrUnavailable: the backend could not be reached or answered with a
	// server-side error; the operation may succeed if retried later.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrPermission: the backend refused the credentials or the operation.
	ErrPermission = errors.New("permission denied by backend")
	// ErrRange: the requested byte range starts past the end of the object.
	ErrRange = errors.New("range not satisfiable")
)
