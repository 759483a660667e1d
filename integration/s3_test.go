package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/internal/s3fault"
	"github.com/cairnfs/cairn/internal/testenv"
)

// newS3Instance is a state directory over a fresh bucket of srv.
func newS3Instance(t *testing.T, srv *s3test.Server) *instance {
	testenv.NeedRoot(t, "FUSE mounts", true)
	bucket := srv.NewBucket(t)
	in := &instance{t: t, home: shortTempDir(t),
		store: "s3://" + bucket + "/ws?endpoint=" + srv.Endpoint + "&region=" + srv.Region,
		extra: []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}}
	in.must("init")
	return in
}

type uploadsJSON struct {
	Pending int    `json:"pending"`
	Failing string `json:"failing"`
}

func (in *instance) uploads(ws string) uploadsJSON {
	in.t.Helper()
	st := decodeJSON[[]struct {
		Uploads *uploadsJSON `json:"uploads"`
	}](in.t, in.must("status", "--json", ws))
	if len(st) != 1 || st[0].Uploads == nil {
		in.t.Fatalf("status of %s has no uploads: %+v", ws, st)
	}
	return *st[0].Uploads
}

// A workspace on S3: snapshots upload in the background from a durable
// outbox; with S3 dead the mount keeps serving, snapshots queue, a daemon
// restart keeps the queue, and when S3 returns it drains; another machine
// with an empty cache then resumes the workspace exactly.
func TestS3_OutboxAndResume(t *testing.T) {
	srv := s3test.Start(t)
	in := newS3Instance(t, srv)
	dir := in.mount("w")
	writeFiles(t, dir, map[string]string{"src/main.go": "package main\n", "README": "turn 1\n"})
	big := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB
	writeFiles(t, dir, map[string]string{"data/big.bin": big})
	r := in.run("snapshot", "--wait", "w", "-m", "turn 1")
	if r.code != 0 || strings.Contains(r.stderr, "queued") {
		t.Fatalf("snapshot --wait: exit %d, stderr %q", r.code, r.stderr)
	}
	if u := in.uploads("w"); u.Pending != 0 {
		t.Fatalf("uploads pending after snapshot --wait: %+v", u)
	}

	// S3 dies. The mount serves, a snapshot commits here and queues.
	srv.Stop(t)
	writeFiles(t, dir, map[string]string{"README": "turn 2, written while S3 was down\n", "src/new.go": "package main // new\n"})
	r = in.run("snapshot", "w", "-m", "turn 2")
	if r.code != 0 || !strings.Contains(r.stderr, "queued") {
		t.Fatalf("snapshot with S3 down: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	turn2 := strings.TrimSpace(r.stdout)
	deadline := time.Now().Add(30 * time.Second)
	for u := in.uploads("w"); u.Pending == 0 || u.Failing == ""; u = in.uploads("w") {
		if time.Now().After(deadline) {
			t.Fatalf("status never showed failing uploads: %+v", u)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data/big.bin")); err != nil || string(b) != big {
		t.Fatalf("reading through the mount with S3 down: %d bytes, %v", len(b), err)
	}
	// The daemon stops without waiting; the queue stays on disk.
	in.must("unmount", "--no-wait", "w")
	if ents, _ := os.ReadDir(filepath.Join(in.home, "workspaces", "w", "outbox", "q")); len(ents) == 0 {
		t.Fatal("the outbox is empty after an unmount with S3 down")
	}

	// S3 is back; the next mount drains the queue.
	srv.Restart(t)
	in.mountAt("w", dir)
	if out := in.must("snapshot", "--wait", "w", "-m", "turn 3"); strings.TrimSpace(out) == "" {
		t.Fatal("no snapshot ID")
	}
	if u := in.uploads("w"); u.Pending != 0 || u.Failing != "" {
		t.Fatalf("uploads after S3 came back: %+v", u)
	}
	want := manifest(t, dir)
	in.must("unmount", "w")

	// Another machine, empty cache: the log has every turn, and a mount
	// shows the same tree, inode numbers included.
	other := in.otherMachine()
	if out := other.must("log", "w"); !strings.Contains(out, turn2[:12]) || !strings.Contains(out, "turn 3") {
		t.Errorf("log on another machine:\n%s", out)
	}
	odir := other.mount("w")
	diffManifests(t, "resumed on another machine", want, manifest(t, odir))
	if b, _ := os.ReadFile(filepath.Join(odir, "README")); string(b) != "turn 2, written while S3 was down\n" {
		t.Errorf("README on the other machine = %q", b)
	}
}

// A turn-end snapshot of a one-file change costs few PUTs (packs, not an
// object per blob): pack, index file, snapshot record, ref.
func TestS3_PutsPerSmallTurn(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3fault.Start(t, srv.Endpoint)
	testenv.NeedRoot(t, "FUSE mounts", true)
	bucket := srv.NewBucket(t)
	in := &instance{t: t, home: shortTempDir(t),
		store: "s3://" + bucket + "/ws?endpoint=" + proxy.URL() + "&region=" + srv.Region,
		extra: []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}}
	in.must("init")
	dir := in.mount("w")
	files := map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("src/d%d/f%d.go", i%10, i)] = fmt.Sprintf("package d // %d\n", i)
	}
	writeFiles(t, dir, files)
	in.must("snapshot", "--wait", "w")
	for turn := range 3 {
		writeFiles(t, dir, map[string]string{"src/d3/f3.go": fmt.Sprintf("package d // turn %d\n", turn)})
		before := proxy.Stats().Requests["PUT"]
		in.must("snapshot", "--wait", "w")
		puts := proxy.Stats().Requests["PUT"] - before
		t.Logf("turn %d: %d PUTs for a one-file change", turn, puts)
		if puts > 5 {
			t.Errorf("turn %d: %d PUTs for a one-file change, want <= 5", turn, puts)
		}
	}
}
