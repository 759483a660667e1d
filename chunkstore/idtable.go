package chunkstore

import (
	"encoding/binary"
	"math/bits"
)

// idTable maps blob IDs to locations with open addressing and linear
// probing. IDs are keyed BLAKE3 hashes, uniformly distributed, so their first
// eight bytes serve as the hash and the table needs no hashing of its own.
// Keys and values live in two flat arrays sized to the load factor (not
// rounded up to a power of two), so a million blobs cost about 1.25 M x 52
// bytes: roughly half what a Go map of the same content costs. The zero ID
// marks an empty slot; it is never a blob's ID. Not safe for concurrent use.
type idTable struct {
	keys []ID
	vals []location
	n    int
}

const (
	idTableLoad    = 0.8 // grow past this fill ratio
	idTableMinSize = 64
)

func newIDTable(n int) *idTable {
	size := max(int(float64(n)/idTableLoad)+1, idTableMinSize)
	return &idTable{keys: make([]ID, size), vals: make([]location, size)}
}

// slot maps an ID onto [0, len) with a multiply-shift instead of a modulo.
func (t *idTable) slot(id ID) int {
	hi, _ := bits.Mul64(binary.LittleEndian.Uint64(id[:8]), uint64(len(t.keys)))
	return int(hi)
}

func (t *idTable) get(id ID) (location, bool) {
	if id.IsZero() {
		return location{}, false
	}
	for i := t.slot(id); ; {
		switch t.keys[i] {
		case id:
			return t.vals[i], true
		case ID{}:
			return location{}, false
		}
		if i++; i == len(t.keys) {
			i = 0
		}
	}
}

// insert adds id if absent and reports whether it did.
func (t *idTable) insert(id ID, loc location) bool {
	if id.IsZero() {
		return false
	}
	if float64(t.n+1) > float64(len(t.keys))*idTableLoad {
		t.grow()
	}
	for i := t.slot(id); ; {
		switch t.keys[i] {
		case id:
			return false
		case ID{}:
			t.keys[i], t.vals[i] = id, loc
			t.n++
			return true
		}
		if i++; i == len(t.keys) {
			i = 0
		}
	}
}

func (t *idTable) grow() {
	bigger := newIDTable(2 * len(t.keys))
	for i, k := range t.keys {
		if !k.IsZero() {
			bigger.insert(k, t.vals[i])
		}
	}
	*t = *bigger
}

func (t *idTable) len() int { return t.n }
