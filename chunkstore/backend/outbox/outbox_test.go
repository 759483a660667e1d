package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	store := chunkstoretest.LocalBackend(t)
	remote := chunkstoretest.NewFaulty(store)
	put(t, remote, "refs/w", "theirs 1", backend.Condition{})
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	o := open(t, remote, t.TempDir())
	info, err := o.Stat(ctx, "refs/w")
	if err != nil {
		t.Fatal(err)
	}
	put(t, o, "snapshots/mine", "mine", backend.Condition{})
	put(t, o, "refs/w", "mine 2", backend.Condition{IfMatch: info.ETag})
	// The other writer wins the race to the remote: it reaches the store
	// while this outbox cannot (it writes past the fault injection).
	rinfo, _ := store.Stat(ctx, "refs/w")
	put(t, store, "refs/w", "theirs 2", backend.Condition{IfMatch: rinfo.ETag})
	remote.Heal()
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

// downRemote is a remote that takes no writes: everything stays queued.
func downRemote(t *testing.T) *chunkstoretest.Faulty {
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	return remote
}

// Objects are written without fsync until Sync; a ref move syncs what was
// queued before it and is itself durable; a store's Flush syncs.
func TestOutbox_Sync(t *testing.T) {
	o := open(t, downRemote(t), t.TempDir())
	put(t, o, "packs/aa/p1", "pack one", backend.Condition{})
	put(t, o, "index/i1", "index one", backend.Condition{})
	if p := o.Pending(); p.Entries != 2 || p.Unsynced != 2 {
		t.Fatalf("after two Puts: %+v, want 2 unsynced entries", p)
	}
	if err := o.Sync(); err != nil {
		t.Fatal(err)
	}
	if p := o.Pending(); p.Unsynced != 0 {
		t.Fatalf("after Sync: %d unsynced", p.Unsynced)
	}
	put(t, o, "snapshots/s1", "snap one", backend.Condition{})
	put(t, o, "refs/w", "ref one", backend.Condition{IfNoneMatch: true})
	if p := o.Pending(); p.Entries != 4 || p.Unsynced != 0 {
		t.Fatalf("after a ref move: %+v, want nothing unsynced", p)
	}

	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	o2 := open(t, remote, t.TempDir())
	s := chunkstoretest.NewStore(t, o2, chunkstore.InitOptions{}, chunkstore.Options{})
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	if _, _, err := s.PutBlob(ctx, chunkstore.KindData, []byte("some data")); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if p := o2.Pending(); p.Entries == 0 || p.Unsynced != 0 {
		t.Errorf("after the store's Flush: %+v, want queued and synced", p)
	}
}

// onDisk writes every queued object to disk at once (no memory queue), as
// the outbox does once its memory is full.
var onDisk = outbox.Options{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Memory: -1}

// crashOutbox queues p1 and p2 durably (Sync), then p3, p4 and p5 without,
// on a remote that is down, written to disk, and crashes. It returns the
// outbox's directory.
func crashOutbox(t *testing.T, remote backend.Backend) string {
	t.Helper()
	dir := t.TempDir()
	o, err := outbox.Open(remote, dir, onDisk)
	if err != nil {
		t.Fatal(err)
	}
	put(t, o, "packs/aa/p1", "pack one", backend.Condition{})
	put(t, o, "packs/aa/p2", "pack two", backend.Condition{})
	if err := o.Sync(); err != nil {
		t.Fatal(err)
	}
	put(t, o, "packs/aa/p3", "pack three", backend.Condition{})
	put(t, o, "packs/aa/p4", "pack four", backend.Condition{})
	put(t, o, "index/i5", "index five", backend.Condition{})
	o.Crash()
	return dir
}

// After a crash of the machine, writes queued since the last Sync may be
// torn: the first torn one is dropped with every later one (none was
// acknowledged as durable); what was synced, and whole writes before the
// torn one, stay and upload.
func TestOutbox_CrashTornUnsynced(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(dir string)
		keep []string // queued writes left after the restart
	}{
		{"data short", func(dir string) { os.Truncate(filepath.Join(dir, "data", "3"), 4) }, []string{"packs/aa/p1", "packs/aa/p2"}},
		{"data zeroed", func(dir string) { os.WriteFile(filepath.Join(dir, "data", "4"), make([]byte, len("pack four")), 0o600) },
			[]string{"packs/aa/p1", "packs/aa/p2", "packs/aa/p3"}},
		{"record torn", func(dir string) { os.WriteFile(filepath.Join(dir, "q", "4.json"), nil, 0o600) },
			[]string{"packs/aa/p1", "packs/aa/p2", "packs/aa/p3"}},
		{"whole", func(string) {}, []string{"packs/aa/p1", "packs/aa/p2", "packs/aa/p3", "packs/aa/p4", "index/i5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote := downRemote(t)
			dir := crashOutbox(t, remote)
			tc.tear(dir)
			var logged []string
			opts := fast
			opts.Logf = func(f string, a ...any) {
				if l := fmt.Sprintf(f, a...); strings.Contains(l, "dropped") {
					logged = append(logged, l)
				}
			}
			o, err := outbox.Open(remote, dir, opts)
			if err != nil {
				t.Fatalf("Open after the crash: %v", err)
			}
			t.Cleanup(func() { o.Close() })
			if p := o.Pending(); p.Entries != len(tc.keep) || p.Unsynced != 0 {
				t.Errorf("pending after the restart: %+v, want %d entries, all synced", p, len(tc.keep))
			}
			if (len(tc.keep) < 5) != (len(logged) > 0) {
				t.Errorf("log %q: want a line exactly when writes were dropped", logged)
			}
			remote.Heal()
			waitFor(t, o)
			want := map[string]string{"packs/aa/p1": "pack one", "packs/aa/p2": "pack two", "packs/aa/p3": "pack three", "packs/aa/p4": "pack four", "index/i5": "index five"}
			for key, data := range want {
				got, err := read(t, remote, key)
				switch {
				case slices.Contains(tc.keep, key) && (err != nil || got != data):
					t.Errorf("remote %s = %q, %v; want %q", key, got, err, data)
				case !slices.Contains(tc.keep, key) && !errors.Is(err, backend.ErrNotFound):
					t.Errorf("remote %s = %q, %v; want it dropped, never uploaded torn", key, got, err)
				}
			}
			// New writes get new sequence numbers, above the watermark.
			put(t, o, "packs/aa/p6", "pack six", backend.Condition{})
			waitFor(t, o)
			if got, err := read(t, remote, "packs/aa/p6"); err != nil || got != "pack six" {
				t.Errorf("a write after the restart: %q, %v", got, err)
			}
		})
	}
}

// A synced write that is damaged is not silently dropped: Open fails and
// says what to do. A record whose data is gone was uploaded (its removal
// did not reach the disk): dropped quietly.
func TestOutbox_CrashSynced(t *testing.T) {
	remote := downRemote(t)
	dir := crashOutbox(t, remote)
	os.Truncate(filepath.Join(dir, "data", "1"), 2)
	if _, err := outbox.Open(remote, dir, fast); err == nil || !strings.Contains(err.Error(), "move the outbox away") {
		t.Fatalf("Open with a damaged synced write: %v, want an error that says what to do", err)
	}

	dir = crashOutbox(t, remote)
	os.Remove(filepath.Join(dir, "data", "2"))
	o := open(t, remote, dir)
	if p := o.Pending(); p.Entries != 4 {
		t.Errorf("pending: %+v, want the 4 writes whose data is there", p)
	}
}

// Uploaded objects kept on local disk are not fsync'd: after a reboot
// they are dropped (the remote has them), within one boot they serve
// reads.
func TestOutbox_KeptAfterReboot(t *testing.T) {
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	dir := t.TempDir()
	o, err := outbox.Open(remote, dir, onDisk)
	if err != nil {
		t.Fatal(err)
	}
	put(t, o, "packs/aa/p1", "pack one", backend.Condition{})
	waitFor(t, o)
	o.Close()
	remote.Fail(chunkstoretest.OpGet, "", -1, backend.ErrUnavailable)
	o = open(t, remote, dir)
	if got, err := read(t, o, "packs/aa/p1"); err != nil || got != "pack one" {
		t.Fatalf("a kept object in the same boot: %q, %v", got, err)
	}
	o.Close()
	os.WriteFile(filepath.Join(dir, "boot"), []byte("another boot\n"), 0o600)
	o = open(t, remote, dir)
	if got, err := read(t, o, "packs/aa/p1"); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("a kept object after a reboot reads %q, %v; want it dropped (read from the remote)", got, err)
	}
}

// Sequence numbers never go back below the watermark, even once every
// write is uploaded: a new unsynced write must never pass for a synced one.
func TestOutbox_SeqAboveWatermark(t *testing.T) {
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	dir := crashOutbox(t, remote) // 1-5 queued, synced up to 2
	o := open(t, remote, dir)     // syncs 3-5
	waitFor(t, o)
	o.Close()
	o, err := outbox.Open(remote, dir, onDisk) // an empty queue
	if err != nil {
		t.Fatal(err)
	}
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	put(t, o, "packs/aa/p6", "pack six", backend.Condition{})
	o.Crash()
	recs, _ := filepath.Glob(filepath.Join(dir, "q", "*.json"))
	if len(recs) != 1 {
		t.Fatalf("queue records %v, want one", recs)
	}
	os.Truncate(filepath.Join(dir, "data", strings.TrimSuffix(filepath.Base(recs[0]), ".json")), 1)
	o, err = outbox.Open(remote, dir, fast)
	if err != nil {
		t.Fatalf("Open after a torn unsynced write: %v (taken for a synced one?)", err)
	}
	defer o.Close()
	if p := o.Pending(); p.Entries != 0 {
		t.Errorf("pending %+v, want the torn write dropped", p)
	}
}

// Objects are held in memory up to Options.Memory (uploaded from there,
// never written to disk if nothing needs them durable), beyond it written
// to disk; a crash loses only what was never synced; Sync and Close write
// what is in memory.
func TestOutbox_Memory(t *testing.T) {
	remote := downRemote(t)
	dir := t.TempDir()
	opts := fast
	opts.Memory = 16
	o, err := outbox.Open(remote, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	put(t, o, "packs/aa/p1", "in memory", backend.Condition{})
	put(t, o, "packs/aa/p2", "too large for the memory left", backend.Condition{})
	if files, _ := filepath.Glob(filepath.Join(dir, "data", "*")); len(files) != 1 {
		t.Errorf("data files %v, want only the object that did not fit in memory", files)
	}
	if got, err := read(t, o, "packs/aa/p1"); err != nil || got != "in memory" {
		t.Errorf("an object in memory reads %q, %v", got, err)
	}
	if p := o.Pending(); p.Entries != 2 || p.Unsynced != 2 {
		t.Errorf("pending %+v, want 2 unsynced", p)
	}
	o.Crash()
	o, err = outbox.Open(remote, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := read(t, o, "packs/aa/p1"); !errors.Is(err, backend.ErrUnavailable) && !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("an unsynced object in memory survived a crash: %v", err)
	}
	if got, err := read(t, o, "packs/aa/p2"); err != nil || got != "too large for the memory left" {
		t.Errorf("a whole object on disk after a crash: %q, %v", got, err)
	}
	put(t, o, "packs/aa/p3", "synced", backend.Condition{})
	if err := o.Sync(); err != nil {
		t.Fatal(err)
	}
	put(t, o, "packs/aa/p4", "closed", backend.Condition{})
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	o2 := open(t, remote, dir)
	o2.Crash()
	o = open(t, remote, dir)
	for key, want := range map[string]string{"packs/aa/p2": "too large for the memory left", "packs/aa/p3": "synced", "packs/aa/p4": "closed"} {
		if got, err := read(t, o, key); err != nil || got != want {
			t.Errorf("%s after Sync/Close and a crash: %q, %v", key, got, err)
		}
	}
	remote.Heal()
	waitFor(t, o)
	for _, key := range []string{"packs/aa/p2", "packs/aa/p3", "packs/aa/p4"} {
		if _, err := read(t, remote, key); err != nil {
			t.Errorf("remote %s: %v", key, err)
		}
	}
}

// PutOwned takes the caller's bytes instead of copying them and gives them
// back once: when uploaded, or at once when they go to disk; never on an
// error.
func TestOutbox_PutOwned(t *testing.T) {
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	opts := fast
	opts.Memory = 16
	o, err := outbox.Open(remote, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var released sync.Map
	putOwned := func(key, data string) {
		t.Helper()
		released.Store(key, 0)
		if _, err := o.PutOwned(ctx, key, []byte(data), func() {
			n, _ := released.Load(key)
			released.Store(key, n.(int)+1)
		}); err != nil {
			t.Fatalf("PutOwned %s: %v", key, err)
		}
	}
	count := func(key string) int { n, _ := released.Load(key); return n.(int) }
	putOwned("packs/aa/small", "held")
	putOwned("packs/aa/large", "larger than the memory left")
	if count("packs/aa/small") != 0 || count("packs/aa/large") != 1 {
		t.Errorf("released small %d, large %d times; want 0 (held in memory) and 1 (written to disk)", count("packs/aa/small"), count("packs/aa/large"))
	}
	if got, err := read(t, o, "packs/aa/small"); err != nil || got != "held" {
		t.Errorf("an owned object reads %q, %v", got, err)
	}
	remote.Heal()
	waitFor(t, o)
	if count("packs/aa/small") != 1 {
		t.Errorf("released %d times after the upload, want 1", count("packs/aa/small"))
	}
	if got, err := read(t, remote, "packs/aa/small"); err != nil || got != "held" {
		t.Errorf("remote: %q, %v", got, err)
	}
	o.Close()
	called := false
	if _, err := o.PutOwned(ctx, "packs/aa/late", []byte("x"), func() { called = true }); err == nil || called {
		t.Errorf("PutOwned on a closed outbox: %v, released %v; want an error and the bytes not taken", err, called)
	}
}

// deadRemote is a remote that answers nothing: reads and writes fail.
func deadRemote(t *testing.T) (*chunkstoretest.Faulty, backend.Backend) {
	under := chunkstoretest.LocalBackend(t)
	remote := chunkstoretest.NewFaulty(under)
	for _, op := range []chunkstoretest.Op{chunkstoretest.OpGet, chunkstoretest.OpPut, chunkstoretest.OpStat, chunkstoretest.OpList} {
		remote.Fail(op, "", -1, backend.ErrUnavailable)
	}
	return remote, under
}

// The first ref of a new workspace, created while the remote is down and
// the outbox has never seen the ref: the create queues like any move and is
// made when the remote is back. What the outbox does know still answers
// at once: a ref it saw in the remote, or has queued, exists.
func TestOutbox_CreateRefWhileDown(t *testing.T) {
	t.Run("Queued", func(t *testing.T) {
		remote, under := deadRemote(t)
		put(t, under, "refs/seen", "theirs", backend.Condition{})
		o := open(t, remote, t.TempDir())
		put(t, o, "snapshots/s1", "snap one", backend.Condition{})
		r1 := put(t, o, "refs/new", "ref one", backend.Condition{IfNoneMatch: true})
		if _, err := o.Put(ctx, "refs/new", strings.NewReader("x"), backend.Condition{IfNoneMatch: true}); !errors.Is(err, backend.ErrConflict) {
			t.Fatalf("a second create of a queued ref: %v, want ErrConflict", err)
		}
		put(t, o, "refs/new", "ref two", backend.Condition{IfMatch: r1.ETag})
		if got, err := read(t, o, "refs/new"); err != nil || got != "ref two" {
			t.Fatalf("the queued ref reads %q, %v", got, err)
		}
		// A ref this outbox has not seen cannot be checked: only a
		// create queues; a move names a version it cannot compare.
		if _, err := o.Put(ctx, "refs/seen", strings.NewReader("x"), backend.Condition{IfMatch: "c-0"}); !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("a move of an unseen ref while down: %v, want ErrUnavailable", err)
		}
		if p := o.Pending(); p.Entries != 3 {
			t.Fatalf("pending while down: %+v", p)
		}
		remote.Heal()
		waitFor(t, o)
		if got, err := read(t, under, "refs/new"); err != nil || got != "ref two" {
			t.Errorf("remote ref after the drain = %q, %v", got, err)
		}
		if got, err := read(t, under, "snapshots/s1"); err != nil || got != "snap one" {
			t.Errorf("remote snapshot after the drain = %q, %v", got, err)
		}
		if p := o.Pending(); p.Entries != 0 || len(p.Lost) != 0 {
			t.Errorf("pending after the drain: %+v", p)
		}
		// Seen now: with the remote down again, a create is refused here.
		if _, err := o.Stat(ctx, "refs/seen"); err != nil {
			t.Fatal(err)
		}
		remote.Fail(chunkstoretest.OpGet, "", -1, backend.ErrUnavailable)
		remote.Fail(chunkstoretest.OpStat, "", -1, backend.ErrUnavailable)
		if _, err := o.Put(ctx, "refs/seen", strings.NewReader("x"), backend.Condition{IfNoneMatch: true}); !errors.Is(err, backend.ErrConflict) {
			t.Fatalf("a create of a ref seen in the remote, remote down: %v, want ErrConflict", err)
		}
	})
	t.Run("Lost", func(t *testing.T) {
		remote, under := deadRemote(t)
		o := open(t, remote, t.TempDir())
		put(t, o, "snapshots/mine", "mine", backend.Condition{})
		put(t, o, "refs/w", "mine 1", backend.Condition{IfNoneMatch: true})
		// Another machine creates the workspace first.
		put(t, under, "refs/w", "theirs 1", backend.Condition{IfNoneMatch: true})
		remote.Heal()
		waitFor(t, o)
		if got, _ := read(t, under, "refs/w"); got != "theirs 1" {
			t.Errorf("remote ref = %q, want the other writer's", got)
		}
		if got, _ := read(t, under, "snapshots/mine"); got != "mine" {
			t.Errorf("the losing create's snapshot is not in the remote: %q", got)
		}
		p := o.Pending()
		if len(p.Lost) != 1 || p.Lost[0].Key != "refs/w" || string(p.Lost[0].Value) != "mine 1" {
			t.Errorf("lost = %+v", p.Lost)
		}
	})
}

// A written-back object's ETag is the same queued and uploaded: a caller
// that holds the tag Put returned finds it in a Stat whenever it runs.
func TestOutbox_ObjectTagStable(t *testing.T) {
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	o := open(t, remote, t.TempDir())
	info := put(t, o, "packs/ab/abcdef", "pack bytes", backend.Condition{})
	queued, err := o.Stat(ctx, "packs/ab/abcdef")
	if err != nil || queued.ETag != info.ETag {
		t.Fatalf("Stat while queued = %+v, %v; Put said %q", queued, err, info.ETag)
	}
	remote.Heal()
	waitFor(t, o)
	uploaded, err := o.Stat(ctx, "packs/ab/abcdef")
	if err != nil || uploaded.ETag != info.ETag {
		t.Fatalf("Stat after upload = %+v, %v; Put said %q", uploaded, err, info.ETag)
	}
	var listed string
	o.List(ctx, "packs/", func(i backend.Info) error { listed = i.ETag; return nil })
	if listed != info.ETag {
		t.Errorf("List ETag %q, Put said %q", listed, info.ETag)
	}
}

// An index file reaches the remote only after the packs queued before it:
// another machine that loads it dedupes against those packs, and its own
// ref moves do not wait for this machine's queue (found by the
// multi-machine torture test: a snapshot on one machine named a pack that
// another machine had indexed but not uploaded).
func TestOutbox_IndexAfterItsPacks(t *testing.T) {
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	remote.Fail(chunkstoretest.OpPut, "packs/", -1, backend.ErrUnavailable)
	o := open(t, remote, t.TempDir())
	put(t, o, "packs/aa/p1", "pack one", backend.Condition{})
	put(t, o, "index/i1", "index naming p1", backend.Condition{})
	put(t, o, "snapshots/s1", "a record after the index", backend.Condition{})
	// Objects after the index go on while the pack fails...
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := remote.Stat(ctx, "snapshots/s1"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an object queued after an index waits for the index")
		}
		time.Sleep(time.Millisecond)
	}
	// ...but the index does not, through many retries of the pack.
	for n := remote.Count(chunkstoretest.OpPut, "packs/aa/p1"); n < 5; n = remote.Count(chunkstoretest.OpPut, "packs/aa/p1") {
		if time.Now().After(deadline) {
			t.Fatalf("the pack upload was retried %d times in 10 s", n)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := remote.Stat(ctx, "index/i1"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("the index reached the remote before its pack: %v", err)
	}
	remote.Heal()
	waitFor(t, o)
	for key, want := range map[string]string{"packs/aa/p1": "pack one", "index/i1": "index naming p1"} {
		if got, err := read(t, remote, key); err != nil || got != want {
			t.Errorf("remote %s = %q, %v", key, got, err)
		}
	}
}
