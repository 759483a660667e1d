package chunkstore

import (
	"encoding/binary"
	"testing"
)

func TestIDTable(t *testing.T) {
	tab := newIDTable(0)
	h := NewHasher(Key{1})
	id := func(i int) ID {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(i))
		return h.Sum(b[:])
	}
	const n = 100_000 // grows many times from the minimum size
	for i := range n {
		if !tab.insert(id(i), location{offset: uint32(i)}) {
			t.Fatalf("insert %d reported a duplicate", i)
		}
	}
	if tab.insert(id(5), location{offset: 99}) {
		t.Fatalf("second insert of an ID succeeded")
	}
	if tab.len() != n {
		t.Fatalf("len = %d, want %d", tab.len(), n)
	}
	for i := range n {
		loc, ok := tab.get(id(i))
		if !ok || loc.offset != uint32(i) {
			t.Fatalf("get %d = %+v, %v", i, loc, ok)
		}
	}
	for i := n; i < n+1000; i++ {
		if _, ok := tab.get(id(i)); ok {
			t.Fatalf("get of absent ID %d succeeded", i)
		}
	}
	if _, ok := tab.get(ID{}); ok || tab.insert(ID{}, location{}) {
		t.Fatalf("the zero ID must never be stored")
	}
	// IDs that all land in the last slots wrap around to the start.
	wrap := newIDTable(0)
	for i := range 20 {
		var k ID
		binary.LittleEndian.PutUint64(k[:8], ^uint64(0))
		k[31] = byte(i + 1)
		wrap.insert(k, location{raw: uint32(i)})
	}
	for i := range 20 {
		var k ID
		binary.LittleEndian.PutUint64(k[:8], ^uint64(0))
		k[31] = byte(i + 1)
		if loc, ok := wrap.get(k); !ok || loc.raw != uint32(i) {
			t.Fatalf("wrapped key %d lost", i)
		}
	}
}
