package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/internal/s3fault"
	"github.com/cairnfs/cairn/internal/testenv"
)

// lockedBuffer collects a running command's output for a test to poll.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

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
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-qm", "turn 1")
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
	// An unmount waits for the uploads, and says so; interrupted, it leaves
	// the workspace mounted (never a forced cleanup of a live daemon).
	cmd := exec.Command(cairnBin, "unmount", "w")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "AWS_EC2_METADATA_DISABLED=true"}, in.env()...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(stderr.String(), "waiting for") && time.Now().Before(deadline.Add(time.Minute)) {
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err == nil || !strings.Contains(stderr.String(), "interrupted") || !in.record("w").alive() || !isMounted(dir) {
		t.Fatalf("unmount interrupted while waiting for uploads: %v, %q; mounted %v", err, stderr.String(), isMounted(dir))
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
	wu := decodeJSON[struct {
		Bytes uint64 `json:"bytes"`
	}](t, other.must("warmup", "--json", "w"))
	if wu.Bytes == 0 {
		t.Errorf("warmup fetched nothing")
	}
	if r := other.run("--cache-size", "lots", "warmup", "w"); r.code != 2 || !strings.Contains(r.stderr, "--cache-size") {
		t.Errorf("a bad --cache-size: exit %d, %s", r.code, r.stderr)
	}
	odir := other.mount("w")
	// Warmed up: every tree and file reads from the local cache, so the
	// whole tree is there even with S3 gone.
	srv.Stop(t)
	diffManifests(t, "resumed on another machine, warmed up, S3 down", want, manifest(t, odir))
	if b, _ := os.ReadFile(filepath.Join(odir, "README")); string(b) != "turn 2, written while S3 was down\n" {
		t.Errorf("README on the other machine = %q", b)
	}
	// git sees the resumed checkout as the first machine left it: the
	// files changed after the commit, and nothing else (stat data, inode
	// numbers included, came back exactly).
	if out := git(t, odir, "status", "--porcelain"); out != " M README\n?? src/new.go\n" {
		t.Errorf("git status on the other machine:\n%s", out)
	}
	srv.Restart(t)

	// A machine that did not warm up, with S3 gone: a read of what is not
	// cached fails with EIO after the bounded retries, and the daemon's log
	// names what could not be read.
	other.must("unmount", "w")
	third := in.otherMachine()
	tdir := third.mount("w")
	srv.Stop(t)
	if _, err := os.ReadFile(filepath.Join(tdir, "data/big.bin")); !errors.Is(err, syscall.EIO) {
		t.Errorf("reading an uncached file with S3 down: %v, want EIO", err)
	}
	if log, _ := os.ReadFile(filepath.Join(third.home, "workspaces", "w", "daemon.log")); !strings.Contains(string(log), "I/O error") || !strings.Contains(string(log), "s3 get") {
		t.Errorf("the daemon's log does not name the failed read:\n%s", log)
	}
	srv.Restart(t)
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

// Two machines, one workspace: the second mount is refused while the
// first's lease lives (--force too). Machine A then loses S3 (a partition:
// its lease cannot be renewed); once the lease expired B takes over with
// --force and snapshots. When A reaches S3 again it finds its lease lost
// and stops serving; its queued snapshot reaches the store, but its ref
// move loses the compare-and-swap: B's head stands, A's snapshot is kept
// and A's log says how to fork it.
func TestS3_LeaseAndTakeover(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3fault.Start(t, srv.Endpoint)
	testenv.NeedRoot(t, "FUSE mounts", true)
	bucket := srv.NewBucket(t)
	creds := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "CAIRN_LEASE_TTL=2s"}
	a := &instance{t: t, home: shortTempDir(t), extra: creds,
		store: "s3://" + bucket + "/ws?endpoint=" + proxy.URL() + "&region=" + srv.Region}
	b := &instance{t: t, home: shortTempDir(t), extra: creds,
		store: "s3://" + bucket + "/ws?endpoint=" + srv.Endpoint + "&region=" + srv.Region}
	a.must("init")
	adir := a.mount("w")
	writeFiles(t, adir, map[string]string{"owner": "a\n"})
	a.must("snapshot", "--wait", "w")

	for _, extra := range [][]string{nil, {"--force"}} {
		r := b.run(append(append([]string{"mount"}, extra...), "w", shortTempDir(t))...)
		if r.code != 4 || !strings.Contains(r.stderr, "is held by") || !strings.Contains(r.stderr, "mount "+adir) {
			t.Fatalf("second mount %v while the lease lives: exit %d, %s", extra, r.code, r.stderr)
		}
	}
	// Another machine sees where the workspace is mounted.
	wss := decodeJSON[[]struct {
		Name  string `json:"name"`
		Lease *struct {
			Holder struct {
				Description string `json:"description"`
			} `json:"holder"`
		} `json:"lease"`
	}](t, b.must("workspaces", "--json"))
	if len(wss) != 1 || wss[0].Lease == nil || wss[0].Lease.Holder.Description != "mount "+adir {
		t.Errorf("workspaces on the other machine: %+v", wss)
	}
	if out := b.must("workspaces"); !strings.Contains(out, "lease until") {
		t.Errorf("workspaces:\n%s", out)
	}
	lease := decodeJSON[[]struct {
		Lease struct {
			State string `json:"state"`
		} `json:"lease"`
	}](t, a.must("status", "--json", "w"))
	if len(lease) != 1 || lease[0].Lease.State != "held" {
		t.Fatalf("status lease: %+v", lease)
	}

	// A is cut off from S3; its next snapshot queues.
	arec := a.record("w")
	proxy.SetDown(true)
	writeFiles(t, adir, map[string]string{"owner": "a, cut off\n"})
	aSnap := strings.TrimSpace(a.must("snapshot", "w"))
	// B takes over once the lease expired (2 s TTL + the 10 s grace).
	var bdir string
	deadline := time.Now().Add(60 * time.Second)
	for {
		d := shortTempDir(t)
		r := b.run("mount", "--force", "w", d)
		if r.code == 0 {
			bdir = d
			t.Cleanup(func() { b.cleanupMount("w", d) })
			break
		}
		if time.Now().After(deadline) || !strings.Contains(r.stderr, "held by") {
			t.Fatalf("takeover: exit %d, %s", r.code, r.stderr)
		}
		time.Sleep(time.Second)
	}
	if got, _ := os.ReadFile(filepath.Join(bdir, "owner")); string(got) != "a\n" {
		t.Fatalf("B sees %q, want A's last uploaded turn", got)
	}
	writeFiles(t, bdir, map[string]string{"owner": "b\n"})
	bSnap := strings.TrimSpace(b.must("snapshot", "--wait", "w"))

	// A reaches S3 again: its lease is lost, its mount turns read-only (it
	// never unmounts into a bare directory); its snapshot is uploaded but
	// B's head stands, and A's is listed as lost with its fork command.
	proxy.SetDown(false)
	deadline = time.Now().Add(90 * time.Second)
	for {
		if lost := lostSnapshots(t, b, "w"); slices.Contains(lost, aSnap) {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(a.home, "workspaces", "w", "daemon.log"))
			t.Fatalf("A's lost snapshot %s is not listed as lost; A's log:\n%s", aSnap[:12], log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !arec.alive() || !isMounted(adir) {
		t.Fatal("A's daemon stopped serving after losing its lease; it must stay, read-only")
	}
	if err := os.WriteFile(filepath.Join(adir, "owner"), []byte("late"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write to A after losing its lease: %v, want EROFS", err)
	}
	log, _ := os.ReadFile(filepath.Join(a.home, "workspaces", "w", "daemon.log"))
	if !strings.Contains(string(log), "read-only") || !strings.Contains(string(log), "cairn fork "+aSnap[:12]) {
		t.Errorf("A's log does not report the lost lease and the lost ref move:\n%s", log)
	}
	a.must("unmount", "w")
	if head := decodeJSON[[]struct {
		ID string `json:"id"`
	}](t, b.must("log", "--json", "-n", "1", "w")); len(head) != 1 || head[0].ID != bSnap {
		t.Errorf("head after the race: %+v, want B's %s", head, bSnap[:12])
	}
	if out := b.must("cat", aSnap[:16]+":owner"); out != "a, cut off\n" {
		t.Errorf("A's snapshot in the store: owner = %q", out)
	}
}
