package chunkstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

// corruptions damage an index file's bytes the ways storage does.
var corruptions = []struct {
	name string
	fn   func([]byte) []byte
}{
	{"Garbage", func(b []byte) []byte { return randData(99, len(b)) }},
	{"Truncated", func(b []byte) []byte { return b[:len(b)/2] }},
	{"BitFlip", func(b []byte) []byte {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0x10
		return b
	}},
}

func TestStore_CorruptIndex(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			testCorruptIndex(t, chunkstoretest.LocalBackend(t), func() chunkstore.Options { return chunkstore.Options{} }, c.fn)
		})
	}
}

func TestStore_CorruptIndexS3(t *testing.T) {
	srv := s3test.Start(t)
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			be := srv.Backend(t, srv.NewBucket(t), "repair")
			// A fresh cache for every open: another machine, which
			// reads the damaged object from the bucket.
			testCorruptIndex(t, be, func() chunkstore.Options { return chunkstore.Options{CacheDir: t.TempDir()} }, c.fn)
		})
	}
}

// warnings collects a store's Logf output.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) logf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, fmt.Sprintf(format, args...))
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

func listKeys(t *testing.T, be backend.Backend, prefix string) []string {
	t.Helper()
	var keys []string
	if err := be.List(ctx, prefix, func(i backend.Info) error { keys = append(keys, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// One corrupt index file costs only the blobs it lists: the store opens
// with a warning naming it, other blobs read, its blobs fail clearly, and
// RepairIndex re-indexes their packs from the trailers, exactly.
func testCorruptIndex(t *testing.T, be backend.Backend, opts func() chunkstore.Options, corrupt func([]byte) []byte) {
	s := chunkstoretest.NewStore(t, be, chunkstore.InitOptions{PackSize: 1 << 20}, opts())
	put := func(seed uint64) map[chunkstore.ID][]byte {
		blobs := map[chunkstore.ID][]byte{}
		for i := range uint64(14) {
			data := randData(seed*100+i, 100<<10)
			id, _, err := s.PutBlob(ctx, chunkstore.KindData, data)
			if err != nil {
				t.Fatal(err)
			}
			blobs[id] = data
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return blobs
	}
	good := put(1)
	first := listKeys(t, be, "index/")
	lost := put(2)
	var victim string
	for _, k := range listKeys(t, be, "index/") {
		if !slices.Contains(first, k) {
			victim = k
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := backend.ReadAll(ctx, be, victim)
	if err != nil {
		t.Fatal(err)
	}
	bad := corrupt(orig)
	if _, err := be.Put(ctx, victim, bytes.NewReader(bad), backend.Condition{}); err != nil {
		t.Fatal(err)
	}

	var w warnings
	o := opts()
	o.Logf = w.logf
	s2 := reopen(t, be, o)
	if msgs := w.all(); len(msgs) != 1 || !strings.Contains(msgs[0], victim) || !strings.Contains(msgs[0], "cairn repair index") {
		t.Errorf("warnings at Open = %q, want one naming %s and the fix", msgs, victim)
	}
	if got := s2.CorruptIndex(); len(got) != 1 || "index/"+got[0].String() != victim {
		t.Errorf("CorruptIndex = %v, want %s", got, victim)
	}
	readAll := func(s *chunkstore.Store, blobs map[chunkstore.ID][]byte, what string) {
		t.Helper()
		for id, want := range blobs {
			if got, err := s.Blob(ctx, id); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: blob %s: %d bytes, %v", what, id.Short(), len(got), err)
			}
		}
	}
	readAll(s2, good, "blobs of the intact index file")
	for id := range lost {
		_, err := s2.Blob(ctx, id)
		if !errors.Is(err, chunkstore.ErrCorrupt) || !strings.Contains(err.Error(), "cairn repair index") || !strings.Contains(err.Error(), victim) {
			t.Fatalf("a blob only the corrupt index file lists: %v, want ErrCorrupt naming %s and the fix", err, victim)
		}
	}
	if err := s2.Prefetch(ctx, slices.Collect(mapKeys(lost))); !be.Properties().Local && !errors.Is(err, chunkstore.ErrCorrupt) {
		t.Errorf("Prefetch of those blobs: %v, want ErrCorrupt", err)
	}

	// A dry run says what it would do and changes nothing.
	before := listKeys(t, be, "")
	rep, err := s2.RepairIndex(ctx, chunkstore.RepairOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Corrupt) != 1 || len(rep.Unindexed) == 0 || rep.Blobs != len(lost) || !rep.Written.IsZero() || len(rep.Quarantined) != 0 || len(rep.BadPacks) != 0 {
		t.Errorf("dry run: %+v", rep)
	}
	if after := listKeys(t, be, ""); !slices.Equal(before, after) {
		t.Errorf("a dry run changed the store: %v -> %v", before, after)
	}

	rep, err = s2.RepairIndex(ctx, chunkstore.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Written.IsZero() || len(rep.Quarantined) != 1 || "index/"+rep.Quarantined[0].String() != victim || rep.Blobs != len(lost) {
		t.Fatalf("repair: %+v", rep)
	}
	readAll(s2, lost, "after the repair, same store")
	if got := s2.CorruptIndex(); len(got) != 0 {
		t.Errorf("CorruptIndex after the repair = %v", got)
	}
	if q, err := backend.ReadAll(ctx, be, "quarantine/"+victim); err != nil || !bytes.Equal(q, bad) {
		t.Errorf("the quarantined copy: %d bytes, %v", len(q), err)
	}
	// The corrupt object is gone, or holds its intended bytes again
	// (the new index file lists the same packs in the same order).
	if now, err := backend.ReadAll(ctx, be, victim); !errors.Is(err, backend.ErrNotFound) && !bytes.Equal(now, orig) {
		t.Errorf("the corrupt index file is still in place: %d bytes, %v", len(now), err)
	}

	// Another process: no warning, every blob reads; a second repair has
	// nothing to do.
	var w3 warnings
	o = opts()
	o.Logf = w3.logf
	s3 := reopen(t, be, o)
	if msgs := w3.all(); len(msgs) != 0 {
		t.Errorf("warnings after the repair: %q", msgs)
	}
	readAll(s3, good, "reopened after the repair")
	readAll(s3, lost, "reopened after the repair")
	before = listKeys(t, be, "")
	rep, err = s3.RepairIndex(ctx, chunkstore.RepairOptions{})
	if err != nil || len(rep.Corrupt)+len(rep.Unindexed)+len(rep.Quarantined) != 0 || !rep.Written.IsZero() {
		t.Errorf("a second repair: %+v, %v", rep, err)
	}
	if after := listKeys(t, be, ""); !slices.Equal(before, after) {
		t.Errorf("a second repair changed the store: %v -> %v", before, after)
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// An index file another writer adds later, corrupt: the lookup that
// reloads the index skips it with one warning, and its blobs fail clearly.
func TestStore_CorruptIndexRefresh(t *testing.T) {
	be := chunkstoretest.LocalBackend(t)
	var w warnings
	s := chunkstoretest.NewStore(t, be, chunkstore.InitOptions{}, chunkstore.Options{Logf: w.logf})
	other := reopen(t, be, chunkstore.Options{})
	data := randData(7, 4096)
	id, _, err := other.PutBlob(ctx, chunkstore.KindData, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	keys := listKeys(t, be, "index/")
	if len(keys) != 1 {
		t.Fatalf("index files: %v", keys)
	}
	if _, err := be.Put(ctx, keys[0], bytes.NewReader([]byte("garbage")), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.Blob(ctx, id); !errors.Is(err, chunkstore.ErrCorrupt) || !strings.Contains(err.Error(), "cairn repair index") {
			t.Fatalf("a blob of a corrupt index file added later: %v", err)
		}
	}
	if msgs := w.all(); len(msgs) != 1 || !strings.Contains(msgs[0], keys[0]) {
		t.Errorf("warnings = %q, want one naming %s", msgs, keys[0])
	}
	if _, err := s.RepairIndex(ctx, chunkstore.RepairOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Blob(ctx, id); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the repair: %d bytes, %v", len(got), err)
	}
}
