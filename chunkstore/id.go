package chunkstore

import (
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/zeebo/blake3"
)

// IDSize is the length of a blob ID in bytes.
const IDSize = 32

// ID names a blob (or an index file, pack or snapshot record): the keyed
// BLAKE3-256 of its plaintext, under the store's hash key. Because the key is
// random per store, IDs reveal nothing about content across stores.
type ID [IDSize]byte

// String returns the lowercase hex form.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short returns the first 12 hex digits, for messages.
func (id ID) Short() string { return hex.EncodeToString(id[:6]) }

// IsZero reports whether id is the zero ID (used as "none").
func (id ID) IsZero() bool { return id == ID{} }

// MarshalText implements encoding.TextMarshaler (hex).
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (hex).
func (id *ID) UnmarshalText(b []byte) error {
	p, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// ParseID parses the 64-digit hex form of an ID.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*IDSize {
		return id, fmt.Errorf("%w: ID %q: want %d hex digits, got %d", ErrInvalid, s, 2*IDSize, len(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: ID %q: %v", ErrInvalid, s, err)
	}
	return id, nil
}

// Key is a store's secret hash key. It is generated randomly at init and kept
// in the store's config.
type Key [32]byte

// Hasher computes IDs under one store key. It is safe for concurrent use:
// hash states are pooled, and each Sum call uses its own.
type Hasher struct {
	proto *blake3.Hasher
	pool  sync.Pool
}

// NewHasher returns a Hasher for key.
func NewHasher(key Key) *Hasher {
	h, err := blake3.NewKeyed(key[:])
	if err != nil {
		// NewKeyed fails only for a key of the wrong length, which the
		// array type rules out.
		panic(err)
	}
	hs := &Hasher{proto: h}
	hs.pool.New = func() any { return hs.proto.Clone() }
	return hs
}

// Sum returns the ID of data.
func (h *Hasher) Sum(data []byte) ID {
	d := h.pool.Get().(*blake3.Hasher)
	d.Reset()
	_, _ = d.Write(data)
	var id ID
	d.Sum(id[:0])
	h.pool.Put(d)
	return id
}

// Digest returns a fresh streaming hash state under the store key, for content
// that arrives in pieces. Its Sum(nil) is the same as Hasher.Sum of the
// concatenated pieces.
func (h *Hasher) Digest() *blake3.Hasher { return h.proto.Clone() }
