package chunkstore_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

// The whole store on a real S3 server: the same operations, the same
// guarantees as on the local backend.
func TestStore_S3(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	be := srv.Backend(t, bucket, "tenant-a")
	cache := t.TempDir()
	s := chunkstoretest.NewStore(t, be, chunkstore.InitOptions{PackSize: 1 << 20}, chunkstore.Options{CacheDir: cache})
	if _, err := chunkstore.Init(ctx, be, chunkstore.InitOptions{}); !errors.Is(err, chunkstore.ErrConflict) {
		t.Fatalf("second init on the same prefix: err = %v, want ErrConflict", err)
	}
	data := append(textData(1, 3<<20), randData(2, 3<<20)...)
	fc, err := s.PutFile(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.PutTree(ctx, &chunkstore.Tree{Entries: []chunkstore.Entry{
		{Name: "big", Type: chunkstore.TypeRegular, Mode: 0o644, Size: fc.Size, Chunks: fc.Chunks, ChunkLists: fc.ChunkLists, Nlink: 1, Ino: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.PutSnapshot(ctx, &chunkstore.Snapshot{Root: root, Workspace: "w", Seq: 1, Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := s.SetRef(ctx, "w", snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	stale := ref
	if ref, err = s.SetRef(ctx, "w", snap, &ref); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetRef(ctx, "w", snap, &stale); !errors.Is(err, chunkstore.ErrConflict) {
		t.Fatalf("stale compare-and-swap on S3: err = %v, want ErrConflict", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A fresh machine: empty cache, same bucket.
	s2 := reopen(t, srv.Backend(t, bucket, "tenant-a"), chunkstore.Options{CacheDir: t.TempDir()})
	head, err := s2.Ref(ctx, "w")
	if err != nil || head.Snapshot != snap || head.Generation != 2 {
		t.Fatalf("Ref = %+v, %v", head, err)
	}
	rec, err := s2.Snapshot(ctx, head.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := s2.Tree(ctx, rec.Root)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := tree.Find("big")
	got := readAll(t, s2, chunkstore.FileContent{Size: e.Size, Chunks: e.Chunks, ChunkLists: e.ChunkLists})
	if !bytes.Equal(got, data) {
		t.Fatal("file read back from S3 differs")
	}
	// Another prefix in the same bucket is another (empty) store.
	if _, err := chunkstore.Open(ctx, srv.Backend(t, bucket, "tenant-b"), chunkstore.Options{}); !errors.Is(err, chunkstore.ErrNotFound) {
		t.Fatalf("Open of an empty prefix: err = %v, want ErrNotFound", err)
	}
}
