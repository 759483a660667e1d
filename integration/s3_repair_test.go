package integration

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/internal/s3fault"
	"github.com/cairnfs/cairn/internal/testenv"
)

// The first snapshot of a new workspace, made while S3 is dead, queues like
// any other and reaches the store when S3 is back. Then one of its index
// objects is corrupted in the bucket: the other workspace still reads, the
// damaged one fails naming the fix, and `cairn repair index` restores it.
func TestS3_NewWorkspaceWhileDownAndRepairIndex(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3fault.Start(t, srv.Endpoint)
	testenv.NeedRoot(t, "FUSE mounts", true)
	bucket := srv.NewBucket(t)
	a := &instance{t: t, home: shortTempDir(t),
		store: "s3://" + bucket + "/ws?endpoint=" + proxy.URL() + "&region=" + srv.Region,
		extra: []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}}
	a.must("init")
	bucketBe := srv.Backend(t, bucket, "ws")
	indexKeys := func() []string {
		t.Helper()
		var keys []string
		if err := bucketBe.List(context.Background(), "index/", func(i backend.Info) error { keys = append(keys, i.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		return keys
	}

	src := t.TempDir()
	writeFiles(t, src, map[string]string{"notes.txt": "the other workspace\n"})
	a.must("import", "other", src)
	before := indexKeys()

	dir := a.mount("new-ws")
	proxy.SetDown(true)
	writeFiles(t, dir, map[string]string{"main.go": "package main // written with S3 down\n"})
	r := a.run("snapshot", "new-ws", "-m", "first")
	if r.code != 0 || !strings.Contains(r.stderr, "queued") {
		t.Fatalf("first snapshot of a new workspace with S3 down: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	snap := strings.TrimSpace(r.stdout)
	if snap == "" {
		t.Fatal("no snapshot ID")
	}
	proxy.SetDown(false)
	a.must("unmount", "new-ws") // waits for the uploads

	b := a.otherMachine()
	if out := b.must("log", "new-ws"); !strings.Contains(out, snap[:12]) || !strings.Contains(out, "first") {
		t.Fatalf("log of new-ws on another machine:\n%s", out)
	}
	if out := b.must("cat", "new-ws:main.go"); out != "package main // written with S3 down\n" {
		t.Fatalf("cat on another machine = %q", out)
	}

	// Corrupt the index objects the new workspace's snapshot wrote.
	var victims []string
	for _, k := range indexKeys() {
		if !slices.Contains(before, k) {
			victims = append(victims, k)
		}
	}
	if len(victims) == 0 {
		t.Fatal("the snapshot wrote no index file")
	}
	for _, k := range victims {
		if _, err := bucketBe.Put(context.Background(), k, bytes.NewReader([]byte("not an index file")), backend.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	c := a.otherMachine() // an empty cache: it reads the damaged objects
	r = c.run("log", "other")
	if r.code != 0 || !strings.Contains(r.stderr, victims[0]) || !strings.Contains(r.stderr, "cairn repair index") {
		t.Fatalf("log of the other workspace with a corrupt index object: exit %d, %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r = c.run("cat", "other:notes.txt"); r.code != 0 || r.stdout != "the other workspace\n" {
		t.Fatalf("cat of the other workspace: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if r = c.run("cat", "new-ws:main.go"); r.code != 5 || !strings.Contains(r.stderr, "cairn repair index") {
		t.Fatalf("cat of the damaged workspace: exit %d, %q, %q; want 5 naming the fix", r.code, r.stdout, r.stderr)
	}
	if out := c.must("repair", "index", "--dry-run"); !strings.Contains(out, victims[0]) || !strings.Contains(out, "would write") {
		t.Fatalf("repair --dry-run:\n%s", out)
	}
	if out := c.must("repair", "index"); !strings.Contains(out, "quarantine/"+victims[0]) {
		t.Fatalf("repair:\n%s", out)
	}
	if out := c.must("cat", "new-ws:main.go"); out != "package main // written with S3 down\n" {
		t.Fatalf("cat after the repair = %q", out)
	}
	d := a.otherMachine()
	if r = d.run("cat", "new-ws:main.go"); r.code != 0 || r.stderr != "" || r.stdout != "package main // written with S3 down\n" {
		t.Fatalf("cat on a fresh machine after the repair: exit %d, %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if out := d.must("repair", "index"); !strings.Contains(out, "nothing to do") {
		t.Fatalf("a second repair:\n%s", out)
	}
}
