package outbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/outbox"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/internal/testenv"
)

// The outbox's disk fills up while the remote is down: a Put is an error
// that wraps ENOSPC (what a snapshot reports), never a crash; what was
// queued before stays readable and uploads once the remote is back, and
// the outbox takes objects again once that has freed its disk.
func TestOutbox_DiskFull(t *testing.T) {
	dir := testenv.SmallDisk(t, "8m")
	remote := chunkstoretest.NewFaulty(chunkstoretest.LocalBackend(t))
	o, err := outbox.Open(remote, dir, outbox.Options{MinBackoff: fast.MinBackoff, MaxBackoff: fast.MaxBackoff, Memory: -1, Keep: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	s := chunkstoretest.NewStore(t, o, chunkstore.InitOptions{}, chunkstore.Options{})
	waitFor(t, o)
	remote.Fail(chunkstoretest.OpPut, "", -1, backend.ErrUnavailable)
	rng := rand.NewChaCha8([32]byte{3})
	obj := make([]byte, 1<<20)
	var queued []string
	for i := 0; ; i++ {
		if i > 16 {
			t.Fatalf("%d MiB queued on an 8 MiB disk", i)
		}
		rng.Read(obj)
		key := fmt.Sprintf("packs/aa/p%d", i)
		_, err = o.Put(ctx, key, bytes.NewReader(obj), backend.Condition{})
		if err != nil {
			break
		}
		queued = append(queued, key)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Put on a full disk: %v, want an error wrapping ENOSPC", err)
	}
	if len(queued) == 0 {
		t.Fatal("nothing queued before the disk was full")
	}
	// A store over the full outbox reports the error from Flush.
	rng.Read(obj)
	_, _, perr := s.PutBlob(ctx, chunkstore.KindData, obj)
	if ferr := s.Flush(ctx); perr == nil && ferr == nil {
		t.Fatal("a store wrote a pack to a full outbox without an error")
	} else {
		t.Logf("store on a full outbox: put %v, flush %v", perr, ferr)
	}
	for _, key := range queued {
		if _, err := read(t, o, key); err != nil {
			t.Fatalf("read %s queued before the disk was full: %v", key, err)
		}
	}
	remote.Heal()
	waitFor(t, o)
	if _, err := o.Put(ctx, "packs/bb/after", bytes.NewReader(obj), backend.Condition{}); err != nil {
		t.Fatalf("Put after the queue drained: %v", err)
	}
	waitFor(t, o)
}
