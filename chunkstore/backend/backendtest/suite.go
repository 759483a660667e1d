package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// Run runs the conformance suite. newBackend must return a fresh, empty
// backend for each call and register its own cleanup.
func Run(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b backend.Backend)
	}{
		{"PutGetStat", testPutGetStat},
		{"Overwrite", testOverwrite},
		{"Ranges", testRanges},
		{"EmptyObject", testEmptyObject},
		{"NotFound", testNotFound},
		{"Delete", testDelete},
		{"List", testList},
		{"ListCallbackError", testListCallbackError},
		{"IfNoneMatch", testIfNoneMatch},
		{"IfMatch", testIfMatch},
		{"ConcurrentIfNoneMatch", testConcurrentIfNoneMatch},
		{"ConcurrentIfMatch", testConcurrentIfMatch},
		{"InvalidKeys", testInvalidKeys},
		{"BodyRewound", testBodyRewound},
		{"LargeObject", testLargeObject},
		{"CancelledContext", testCancelledContext},
		{"Properties", testProperties},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newBackend(t))
		})
	}
}

func put(t *testing.T, b backend.Backend, key string, data []byte) backend.Info {
	t.Helper()
	info, err := b.Put(context.Background(), key, bytes.NewReader(data), backend.Condition{})
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return info
}

func get(t *testing.T, b backend.Backend, key string, off, n int64) []byte {
	t.Helper()
	rc, err := b.Get(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): %v", key, off, n, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): read: %v", key, off, n, err)
	}
	return data
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testPutGetStat(t *testing.T, b backend.Backend) {
	data := randBytes(1, 10000)
	info := put(t, b, "packs/ab/abcdef", data)
	if info.Size != int64(len(data)) {
		t.Errorf("Put Info.Size = %d, want %d", info.Size, len(data))
	}
	if info.ETag == "" {
		t.Errorf("Put returned an empty ETag")
	}
	if got := get(t, b, "packs/ab/abcdef", 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("Get returned %d bytes, not what was put", len(got))
	}
	st, err := b.Stat(context.Background(), "packs/ab/abcdef")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if st.Size != int64(len(data)) || st.ETag != info.ETag || st.Key != "packs/ab/abcdef" {
		t.Errorf("Stat = %+v, want size %d etag %q", st, len(data), info.ETag)
	}
}

func testOverwrite(t *testing.T, b backend.Backend) {
	i1 := put(t, b, "refs/main", []byte("one"))
	i2 := put(t, b, "refs/main", []byte("two, longer"))
	if i1.ETag == i2.ETag {
		t.Errorf("ETag did not change when content changed: %q", i1.ETag)
	}
	if got := string(get(t, b, "refs/main", 0, -1)); got != "two, longer" {
		t.Errorf("after overwrite Get = %q", got)
	}
}

func testRanges(t *testing.T, b backend.Backend) {
	data := randBytes(2, 4096)
	put(t, b, "obj", data)
	for _, tc := range []struct{ off, n int64 }{
		{0, 1}, {0, 4096}, {1, 100}, {4000, 96}, {4095, 1}, {100, -1}, {4000, 1000}, {0, 0},
	} {
		want := data[tc.off:]
		if tc.n >= 0 && tc.n < int64(len(want)) {
			want = want[:tc.n]
		}
		if got := get(t, b, "obj", tc.off, tc.n); !bytes.Equal(got, want) {
			t.Errorf("Get(off=%d, n=%d) = %d bytes, want %d", tc.off, tc.n, len(got), len(want))
		}
	}
	if _, err := b.Get(context.Background(), "obj", 4096, 10); !errors.Is(err, backend.ErrRange) {
		t.Errorf("Get at offset == size: err = %v, want ErrRange", err)
	}
	if _, err := b.Get(context.Background(), "obj", 10000, -1); !errors.Is(err, backend.ErrRange) {
		t.Errorf("Get past the end: err = %v, want ErrRange", err)
	}
}

func testEmptyObject(t *testing.T, b backend.Backend) {
	info := put(t, b, "empty", nil)
	if info.Size != 0 {
		t.Errorf("Size = %d", info.Size)
	}
	if got := get(t, b, "empty", 0, -1); len(got) != 0 {
		t.Errorf("Get empty object returned %d bytes", len(got))
	}
}

func testNotFound(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	if _, err := b.Get(ctx, "missing/key", 0, -1); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Get missing: err = %v, want ErrNotFound", err)
	}
	if _, err := b.Stat(ctx, "missing/key"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Stat missing: err = %v, want ErrNotFound", err)
	}
	put(t, b, "dir/file", []byte("x"))
	if _, err := b.Stat(ctx, "dir"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Stat of a key prefix: err = %v, want ErrNotFound", err)
	}
}

func testDelete(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	put(t, b, "a/b", []byte("x"))
	if err := b.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := b.Stat(ctx, "a/b"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Stat after Delete: err = %v, want ErrNotFound", err)
	}
	if err := b.Delete(ctx, "a/b"); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
}

func listKeys(t *testing.T, b backend.Backend, prefix string) []string {
	t.Helper()
	var keys []string
	err := b.List(context.Background(), prefix, func(i backend.Info) error {
		keys = append(keys, fmt.Sprintf("%s:%d", i.Key, i.Size))
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return keys
}

func testList(t *testing.T, b backend.Backend) {
	for _, k := range []string{"packs/01/x1", "packs/00/x0", "packs/0f/x2", "index/i1", "packs-other", "refs/a-b", "refs/a/c"} {
		put(t, b, k, []byte(k))
	}
	for _, tc := range []struct {
		prefix string
		want   string
	}{
		{"packs/", "packs/00/x0:11 packs/01/x1:11 packs/0f/x2:11"},
		{"packs/0", "packs/00/x0:11 packs/01/x1:11 packs/0f/x2:11"},
		{"packs/01", "packs/01/x1:11"},
		{"packs", "packs-other:11 packs/00/x0:11 packs/01/x1:11 packs/0f/x2:11"},
		{"refs/", "refs/a-b:8 refs/a/c:8"},
		{"index/", "index/i1:8"},
		{"nothing/", ""},
		{"", "index/i1:8 packs-other:11 packs/00/x0:11 packs/01/x1:11 packs/0f/x2:11 refs/a-b:8 refs/a/c:8"},
	} {
		if got := strings.Join(listKeys(t, b, tc.prefix), " "); got != tc.want {
			t.Errorf("List(%q) =\n  %s\nwant\n  %s", tc.prefix, got, tc.want)
		}
	}
}

func testListCallbackError(t *testing.T, b backend.Backend) {
	put(t, b, "k/1", nil)
	put(t, b, "k/2", nil)
	stop := errors.New("stop")
	calls := 0
	err := b.List(context.Background(), "k/", func(backend.Info) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("List with failing callback: err = %v after %d calls, want the callback's error after 1", err, calls)
	}
}

func testIfNoneMatch(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	if _, err := b.Put(ctx, "config", bytes.NewReader([]byte("v1")), backend.Condition{IfNoneMatch: true}); err != nil {
		t.Fatalf("first IfNoneMatch put: %v", err)
	}
	_, err := b.Put(ctx, "config", bytes.NewReader([]byte("v2")), backend.Condition{IfNoneMatch: true})
	if !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("second IfNoneMatch put: err = %v, want ErrConflict", err)
	}
	if got := string(get(t, b, "config", 0, -1)); got != "v1" {
		t.Errorf("losing put changed the object: %q", got)
	}
}

func testIfMatch(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	i1 := put(t, b, "refs/ws", []byte("gen1"))
	i2, err := b.Put(ctx, "refs/ws", bytes.NewReader([]byte("gen2")), backend.Condition{IfMatch: i1.ETag})
	if err != nil {
		t.Fatalf("IfMatch with current etag: %v", err)
	}
	if _, err := b.Put(ctx, "refs/ws", bytes.NewReader([]byte("gen3")), backend.Condition{IfMatch: i1.ETag}); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("IfMatch with stale etag: err = %v, want ErrConflict", err)
	}
	if got := string(get(t, b, "refs/ws", 0, -1)); got != "gen2" {
		t.Errorf("object = %q, want gen2", got)
	}
	if _, err := b.Put(ctx, "refs/missing", bytes.NewReader([]byte("x")), backend.Condition{IfMatch: i2.ETag}); !errors.Is(err, backend.ErrConflict) && !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("IfMatch on a missing key: err = %v, want ErrConflict or ErrNotFound", err)
	}
	if _, err := b.Put(ctx, "refs/ws", bytes.NewReader(nil), backend.Condition{IfMatch: "x", IfNoneMatch: true}); err == nil {
		t.Errorf("a condition with both fields set was accepted")
	}
}

func testConcurrentIfNoneMatch(t *testing.T, b backend.Backend) {
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = b.Put(context.Background(), "refs/race", bytes.NewReader([]byte{byte(i)}), backend.Condition{IfNoneMatch: true})
		})
	}
	wg.Wait()
	checkOneWinner(t, b, errs)
}

func testConcurrentIfMatch(t *testing.T, b backend.Backend) {
	base := put(t, b, "refs/race", []byte("base"))
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = b.Put(context.Background(), "refs/race", bytes.NewReader([]byte{byte(i)}), backend.Condition{IfMatch: base.ETag})
		})
	}
	wg.Wait()
	checkOneWinner(t, b, errs)
}

func checkOneWinner(t *testing.T, b backend.Backend, errs []error) {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both won a conditional put", winner, i)
			}
			winner = i
		case !errors.Is(err, backend.ErrConflict):
			t.Errorf("writer %d: err = %v, want nil or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer won")
	}
	if got := get(t, b, "refs/race", 0, -1); !bytes.Equal(got, []byte{byte(winner)}) {
		t.Errorf("object = %v, want the winner's %v", got, []byte{byte(winner)})
	}
}

func testInvalidKeys(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	for _, key := range []string{"", "/abs", "a//b", "a/../b", "./a", "a/", "a\x00b"} {
		if _, err := b.Put(ctx, key, bytes.NewReader(nil), backend.Condition{}); !errors.Is(err, backend.ErrInvalidKey) {
			t.Errorf("Put(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if _, err := b.Get(ctx, key, 0, -1); !errors.Is(err, backend.ErrInvalidKey) {
			t.Errorf("Get(%q): err = %v, want ErrInvalidKey", key, err)
		}
	}
}

func testBodyRewound(t *testing.T, b backend.Backend) {
	r := bytes.NewReader([]byte("whole body"))
	if _, err := r.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(context.Background(), "k", r, backend.Condition{}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got := string(get(t, b, "k", 0, -1)); got != "whole body" {
		t.Errorf("Get = %q: Put did not read the body from its start", got)
	}
}

func testLargeObject(t *testing.T, b backend.Backend) {
	data := randBytes(3, 17<<20+123)
	put(t, b, "packs/ff/large", data)
	if got := get(t, b, "packs/ff/large", 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("large object round trip failed (%d bytes back)", len(got))
	}
	off := int64(16<<20 + 7)
	if got := get(t, b, "packs/ff/large", off, 5000); !bytes.Equal(got, data[off:off+5000]) {
		t.Fatalf("range of large object differs")
	}
}

func testCancelledContext(t *testing.T, b backend.Backend) {
	put(t, b, "k", []byte("x"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Put(ctx, "k2", bytes.NewReader([]byte("x")), backend.Condition{}); err == nil {
		t.Errorf("Put with a cancelled context succeeded")
	}
	if _, err := b.Stat(ctx, "k"); err == nil {
		t.Errorf("Stat with a cancelled context succeeded")
	}
}

func testProperties(t *testing.T, b backend.Backend) {
	if p := b.Properties(); p.Location == "" {
		t.Errorf("Properties().Location is empty")
	}
}
