package chunkstore

import "errors"

var (
	// ErrNotFound: a blob, snapshot, ref or the store itself does not exist.
	ErrNotFound = errors.New("not found")
	// ErrCorrupt: stored bytes do not decode, or do not match their ID.
	ErrCorrupt = errors.New("corrupt data")
	// ErrConflict: a ref moved under us (compare-and-swap lost), or a store
	// already exists where one was to be created.
	ErrConflict = errors.New("conflict")
	// ErrVersion: an object was written in a format version this build does
	// not know; it was written by a newer cairn.
	ErrVersion = errors.New("unsupported format version")
	// ErrInvalid: an argument is malformed (a workspace name, an ID string,
	// a config value).
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the store was used after Close.
	ErrClosed = errors.New("store closed")
	// ErrLeased: another mount holds the workspace's lease, so acquiring it
	// was refused; or a lease this process held was taken over (or deleted)
	// and is lost. It is a kind of conflict: errors.Is(err, ErrConflict)
	// holds too, so code that handles conflicts (exit codes, the daemon's
	// error kinds) handles it without change.
	ErrLeased error = &subError{msg: "leased", parent: ErrConflict}
)

// subError is a sentinel that refines another: it matches its parent
// through Unwrap, and its text is its own.
type subError struct {
	msg    string
	parent error
}

func (e *subError) Error() string { return e.msg }
func (e *subError) Unwrap() error { return e.parent }
