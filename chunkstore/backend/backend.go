package backend

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// Backend is the object-storage contract. Keys are slash-separated relative
// paths ("packs/ab/ab12...", "refs/main"); see ValidateKey.
//
// All methods are safe for concurrent use by multiple goroutines. Objects are
// replaced atomically: a reader sees either the whole old or the whole new
// object, never a mix or a prefix. Errors wrap the sentinels of this package
// (ErrNotFound, ErrConflict, ErrRange, ErrUnavailable, ErrPermission,
// ErrInvalidKey) so callers can test them with errors.Is.
type Backend interface {
	// Get returns length bytes of the object at key starting at offset.
	// length < 0 reads to the end. A range that extends past the end of the
	// object is cut short at the end; an offset at or past the end of a
	// non-empty object is ErrRange. A missing object is ErrNotFound. The
	// caller must Close the reader.
	Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)

	// Put stores the bytes of body (read from its start) at key and returns
	// the new object's Info. It is durable when it returns: the object
	// survives a crash of the process and, where the medium allows, of the
	// machine.
	//
	// With a zero Condition it overwrites unconditionally, which is
	// idempotent for the immutable, content-addressed objects cairn writes.
	// With IfNoneMatch it fails with ErrConflict if the key exists; with
	// IfMatch it fails with ErrConflict unless the object exists with that
	// ETag. Conditional puts are linearizable per key: of two concurrent puts
	// conditioned on the same state, at most one succeeds.
	Put(ctx context.Context, key string, body io.ReadSeeker, cond Condition) (Info, error)

	// Stat returns the object's size and ETag, or ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)

	// List calls fn for every object whose key starts with prefix, in
	// lexical key order. ETag may be empty in listed Infos. An error from fn
	// stops the listing and is returned as is.
	List(ctx context.Context, prefix string, fn func(Info) error) error

	// Delete removes the object. Deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error

	// Properties describes the backend.
	Properties() Properties

	// Close releases resources. The backend must not be used afterwards.
	Close() error
}

// Condition makes a Put conditional. The zero value is unconditional. At most
// one field may be set.
type Condition struct {
	// IfMatch: succeed only if the object exists and its ETag equals this.
	IfMatch string
	// IfNoneMatch: succeed only if no object exists at the key.
	IfNoneMatch bool
}

// Validate reports whether the condition is well formed.
func (c Condition) Validate() error {
	if c.IfMatch != "" && c.IfNoneMatch {
		return fmt.Errorf("condition sets both IfMatch and IfNoneMatch")
	}
	return nil
}

// Info describes one stored object.
type Info struct {
	Key  string
	Size int64
	// ETag identifies this version of the object: it changes whenever the
	// content changes. Opaque; compare for equality only.
	ETag    string
	ModTime time.Time
}

// Properties describes a backend's nature and capabilities.
type Properties struct {
	// Location is a human-readable description of where objects live, with
	// no secrets in it ("/var/lib/cairn/store", "s3://bucket/prefix").
	Location string
	// Local is true when objects live on this machine's disk, so a local
	// cache in front of it would only duplicate the data.
	Local bool
}

// ValidateKey checks that key is a well-formed object key: non-empty,
// relative, no empty, "." or ".." segments, no NUL or backslash.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if strings.ContainsAny(key, "\x00\\") {
		return fmt.Errorf("%w: %q contains NUL or backslash", ErrInvalidKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q", ErrInvalidKey, key)
		}
	}
	return nil
}

// ReadAll fetches a whole object into memory, through the backend's own
// ReadAll(ctx, key) if it has one (the local backend: fewer system calls).
func ReadAll(ctx context.Context, b Backend, key string) ([]byte, error) {
	if r, ok := b.(interface {
		ReadAll(ctx context.Context, key string) ([]byte, error)
	}); ok {
		return r.ReadAll(ctx, key)
	}
	rc, err := b.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if sz, ok := rc.(interface{ Size() int64 }); ok && sz.Size() >= 0 && sz.Size() < 1<<30 {
		// A known size (a local file): one buffer, one read.
		data := make([]byte, sz.Size())
		if _, err := io.ReadFull(rc, data); err != nil {
			return nil, fmt.Errorf("read %s: %w", key, err)
		}
		return data, nil
	}
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return data, nil
}
