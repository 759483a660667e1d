package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/backendtest"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/chunkstore/backend/outbox"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

var ctx = context.Background()

var fast = outbox.Options{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}

func open(t *testing.T, remote backend.Backend, dir string) *outbox.Backend {
	t.Helper()
	o, err := outbox.Open(remote, dir, fast)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func waitFor(t *testing.T, o *outbox.Backend) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := o.Wait(c); err != nil {
		t.Fatalf("Wait: %v (pending %+v)", err, o.Pending())
	}
}

// The outbox is a backend like any other: the conformance suite, with a
// drain after every operation the suite makes.
func TestOutbox_Conformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return open(t, chunkstoretest.LocalBackend(t), t.TempDir())
	})
}

func put(t *testing.T, b backend.Backend, key, data string, cond backend.Condition) backend.Info {
	t.Helper()
	info, err := b.Put(ctx, key, strings.NewReader(data), cond)
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	return info
}

func read(t *testing.T, b backend.Backend, key string) (string, error) {
	t.Helper()
	d, err := backend.ReadAll(ctx, b, key)
	return string(d), err
}

// With the remote down, writes are queued durably and read back locally;
// the ref in the remote moves only after the objects it depends on are
// there; a restart resumes the queue; recovery drains it.
func TestOutbox_DownRestartDrain(t *testing.T) {
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	dir := t.TempDir()
	o, err := outbox.Open(remote, dir, fast)
	if err != nil {
		t.Fatal(err)
	}
	put(t, o, "packs/aa/p1", "pack one", backend.Condition{})
	put(t, o, "snapshots/s1", "snap one", backend.Condition{})
	r1 := put(t, o, "refs/w", "ref one", backend.Condition{IfNoneMatch: true})
	if got, err := read(t, o, "packs/aa/p1"); err != nil || got != "pack one" {
		t.Fatalf("queued pack reads %q, %v", got, err)
	}
	if _, err := remote.Stat(ctx, "packs/aa/p1"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("the remote has the pack while it is down: %v", err)
	}
	// Compare-and-swap against the queued value.
	if _, err := o.Put(ctx, "refs/w", strings.NewReader("x"), backend.Condition{IfNoneMatch: true}); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("IfNoneMatch on a queued ref: %v", err)
	}
	if _, err := o.Put(ctx, "refs/w", strings.NewReader("x"), backend.Condition{IfMatch: "stale"}); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("IfMatch with a stale ETag: %v", err)
	}
	put(t, o, "packs/bb/p2", "pack two", backend.Condition{})
	put(t, o, "refs/w", "ref two", backend.Condition{IfMatch: r1.ETag})
	var keys []string
	o.List(ctx, "", func(i backend.Info) error { keys = append(keys, i.Key); return nil })
	if strings.Join(keys, " ") != "packs/aa/p1 packs/bb/p2 refs/w snapshots/s1" {
		t.Fatalf("List = %v", keys)
	}
	p := o.Pending()
	if p.Entries != 5 || p.Failing == nil || !errors.Is(p.Failing, backend.ErrUnavailable) {
		t.Fatalf("pending while down: %+v", p)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := o.Wait(short); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "5 writes still queued") {
		t.Errorf("Wait while down: %v", err)
	}
	cancel()
	// A restart (a crash would leave the same: every write was fsync'd).
	o.Close()
	o = open(t, remote, dir)
	if got, err := read(t, o, "refs/w"); err != nil || got != "ref two" {
		t.Fatalf("after a restart the ref reads %q, %v", got, err)
	}
	// The ref must not reach the remote before the pack it follows.
	remote.Heal()
	remote.Fail(chunkstoretest.OpPut, "packs/bb", 3, backend.ErrUnavailable)
	waitFor(t, o)
	for key, want := range map[string]string{"packs/aa/p1": "pack one", "packs/bb/p2": "pack two", "snapshots/s1": "snap one", "refs/w": "ref two"} {
		if got, err := read(t, remote, key); err != nil || got != want {
			t.Errorf("remote %s = %q, %v", key, got, err)
		}
	}
	if p := o.Pending(); p.Entries != 0 || p.Failing != nil || len(p.Lost) != 0 {
		t.Errorf("pending after the drain: %+v", p)
	}
	if n := remote.Count(chunkstoretest.OpPut, "refs/w"); n != 2 {
		t.Errorf("%d ref PUTs reached the remote, want 2 (one per move)", n)
	}
}

// A move queued here loses to another writer that moved the remote ref
// first: it is dropped and reported; the objects are uploaded.
func TestOutbox_LostCompareAndSwap(t *testing.T) {
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	put(t, remote, "refs/w", "theirs 1", backend.Condition{})
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	o := open(t, remote, t.TempDir())
	info, err := o.Stat(ctx, "refs/w")
	if err != nil {
		t.Fatal(err)
	}
	put(t, o, "snapshots/mine", "mine", backend.Condition{})
	put(t, o, "refs/w", "mine 2", backend.Condition{IfMatch: info.ETag})
	remote.Heal()
	// The other writer wins the race to the remote.
	rinfo, _ := remote.Stat(ctx, "refs/w")
	remote.Fail(chunkstoretest.OpPut, "snapshots/", 1, backend.ErrUnavailable) // hold the queue back a moment
	put(t, remote, "refs/w", "theirs 2", backend.Condition{IfMatch: rinfo.ETag})
	waitFor(t, o)
	if got, _ := read(t, remote, "refs/w"); got != "theirs 2" {
		t.Errorf("remote ref = %q, want the other writer's", got)
	}
	if got, _ := read(t, remote, "snapshots/mine"); got != "mine" {
		t.Errorf("the losing move's snapshot is not in the remote: %q", got)
	}
	p := o.Pending()
	if len(p.Lost) != 1 || p.Lost[0].Key != "refs/w" || string(p.Lost[0].Value) != "mine 2" {
		t.Errorf("lost = %+v", p.Lost)
	}
	if got, _ := read(t, o, "refs/w"); got != "theirs 2" {
		t.Errorf("the outbox still shows %q for the ref", got)
	}
}

// A chunkstore.Store over an outbox: snapshots and ref moves queue while
// the remote is down; another machine sees them once drained.
func TestOutbox_Store(t *testing.T) {
	dir := t.TempDir()
	lb, err := local.Open(dir, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	remote := chunkstoretest.NewFaulty(lb)
	remote.Remote = true
	if _, err := chunkstore.Init(ctx, remote, chunkstore.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	o := open(t, remote, t.TempDir())
	st, err := chunkstore.Open(ctx, o, chunkstore.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	var ref *chunkstore.Ref
	var last chunkstore.ID
	for i := range 3 {
		fc, err := st.PutFile(ctx, bytes.NewReader(bytes.Repeat([]byte{byte(i)}, 100_000)))
		if err != nil {
			t.Fatal(err)
		}
		tree, err := st.PutTree(ctx, &chunkstore.Tree{Entries: []chunkstore.Entry{{Name: "f", Type: chunkstore.TypeRegular, Mode: 0o644, Ino: 2, Nlink: 1, Size: fc.Size, Chunks: fc.Chunks, ChunkLists: fc.ChunkLists}}})
		if err != nil {
			t.Fatal(err)
		}
		snap := &chunkstore.Snapshot{Root: tree, Workspace: "w", Seq: uint64(i + 1), Time: time.Now()}
		if ref != nil {
			snap.Parents = []chunkstore.ID{ref.Snapshot}
		}
		if last, err = st.PutSnapshot(ctx, snap); err != nil {
			t.Fatal(err)
		}
		r, err := st.SetRef(ctx, "w", last, ref)
		if err != nil {
			t.Fatalf("SetRef %d: %v", i, err)
		}
		ref = &r
	}
	if r, err := st.Ref(ctx, "w"); err != nil || r.Snapshot != last || r.Generation != 3 {
		t.Fatalf("Ref through the outbox: %+v, %v", r, err)
	}
	remote.Heal()
	waitFor(t, o)
	// Another machine: straight on the remote.
	other, err := chunkstore.Open(ctx, remote, chunkstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	r, err := other.Ref(ctx, "w")
	if err != nil || r.Snapshot != last || r.Generation != 3 {
		t.Fatalf("remote ref: %+v, %v", r, err)
	}
	snap, err := other.Snapshot(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := other.Tree(ctx, snap.Root)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := other.OpenFile(ctx, tree.Entries[0].Content())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100_000)
	if _, err := fr.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, bytes.Repeat([]byte{2}, 100_000)) {
		t.Fatalf("file of the last snapshot on the other machine: %v", err)
	}
	// The chain continues after the drain: the Store's ETags still match.
	if _, err := st.SetRef(ctx, "w", last, ref); err != nil {
		t.Fatalf("SetRef after the drain: %v", err)
	}
}

// Concurrent writers: queue records land out of sequence order; every
// entry still uploads (an early bug counted an entry inserted before a
// running one as started, and it never was), and Wait returns.
func TestOutbox_ConcurrentPuts(t *testing.T) {
	remote := chunkstoretest.LocalBackend(t)
	o := open(t, remote, t.TempDir())
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 20 {
				key := fmt.Sprintf("packs/%02x/w%d-%d", w, w, i)
				if _, err := o.Put(ctx, key, strings.NewReader(key), backend.Condition{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	put(t, o, "refs/w", "after all", backend.Condition{})
	waitFor(t, o)
	n := 0
	remote.List(ctx, "packs/", func(backend.Info) error { n++; return nil })
	if n != 320 {
		t.Errorf("%d packs in the remote, want 320", n)
	}
	if got, _ := read(t, remote, "refs/w"); got != "after all" {
		t.Errorf("ref = %q", got)
	}
}
