package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/testenv"
)

// fullHome is an instance whose HOME (journals, cache, the default local
// store) is a small tmpfs.
// storeOutside: the store is a local directory on another disk.
func fullHome(t *testing.T, size string, storeOutside bool) *instance {
	testenv.NeedRoot(t, "FUSE mounts and a small tmpfs", true)
	home := shortTempDir(t)
	if err := unix.Mount("tmpfs", home, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(home, unix.MNT_DETACH) })
	in := &instance{t: t, home: home, store: filepath.Join(home, "store")}
	if storeOutside {
		in.store = filepath.Join(shortTempDir(t), "store")
	}
	t.Cleanup(in.unmountAll) // before the tmpfs goes
	in.must("init")
	return in
}

// oneLineOrOK checks what a verb said on a full disk: success, or one line
// on stderr that says there is no space, and never a crash.
func oneLineOrOK(t *testing.T, what string, r result) {
	t.Helper()
	if r.code == 0 {
		t.Logf("%s on a full disk succeeded: %s", what, strings.TrimSpace(r.stdout))
		return
	}
	msg := strings.TrimSpace(r.stderr)
	if strings.Count(msg, "\n") > 0 || strings.Contains(msg, "goroutine") || strings.Contains(msg, "panic") || strings.Contains(msg, "SIGBUS") {
		t.Fatalf("%s on a full disk: exit %d, not one line:\n%s", what, r.code, msg)
	}
	if !strings.Contains(msg, "space") && !strings.Contains(msg, "disk full") {
		t.Fatalf("%s on a full disk: exit %d, %q does not say the disk is full", what, r.code, msg)
	}
	t.Logf("%s on a full disk: exit %d: %s", what, r.code, msg)
}

// Issue 15, item 5: a full disk under HOME killed the daemon with SIGBUS
// inside Badger, the offline snapshot crashed with a goroutine dump, and the
// next mount failed without a word in the log. Now: ENOSPC to the writer,
// reads keep working, snapshot and mount fail in one line (or succeed from
// the journal's reserve), unmount and mount again work, and the workspace
// works again once space is freed.
func TestDiskFull_Home(t *testing.T) {
	in := fullHome(t, "256m", false)
	mnt := in.mount("ws")
	keep := bytes.Repeat([]byte("kept "), 2000)
	if err := os.WriteFile(filepath.Join(mnt, "keep"), keep, 0o644); err != nil {
		t.Fatal(err)
	}
	in.must("snapshot", "ws", "-m", "before")

	// Fill HOME through the mount (FUSE passthrough writes go straight to
	// the staging file: the daemon does not see them).
	dd := exec.Command("dd", "if=/dev/urandom", "of="+filepath.Join(mnt, "fill"), "bs=1M", "count=1024")
	out, err := dd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "No space left on device") {
		t.Fatalf("dd filling HOME: %v\n%s", err, out)
	}
	rec := in.record("ws")
	if rec == nil || !rec.alive() {
		t.Fatalf("the daemon died on a full disk; its log:\n%s", in.daemonLog("ws"))
	}
	// Reads work, small writes fail with ENOSPC, and the daemon lives on.
	if got, err := os.ReadFile(filepath.Join(mnt, "keep")); err != nil || !bytes.Equal(got, keep) {
		t.Fatalf("read on a full disk: %d bytes, %v", len(got), err)
	}
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatalf("readdir on a full disk: %v", err)
	}
	for i := range 200 {
		err := os.WriteFile(filepath.Join(mnt, "small"), bytes.Repeat([]byte{1}, 64<<10), 0o644)
		if err == nil {
			continue // the journal's own writes may fit in what is left
		}
		if !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("write %d on a full disk: %v, want ENOSPC", i, err)
		}
	}
	oneLineOrOK(t, "cairn snapshot (mounted)", in.run("snapshot", "ws", "-m", "full"))
	if !rec.alive() {
		t.Fatalf("the daemon died after a snapshot on a full disk; its log:\n%s", in.daemonLog("ws"))
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "keep")); err != nil || !bytes.Equal(got, keep) {
		t.Fatalf("read after the snapshot: %d bytes, %v", len(got), err)
	}

	// Unmount on the full disk, then the offline snapshot: one line or done.
	in.must("unmount", "ws")
	oneLineOrOK(t, "cairn snapshot (offline)", in.run("snapshot", "ws", "-m", "offline"))

	// A disk filled to the last block while nothing is mounted: mount
	// fails in one line and says why in the daemon's log too.
	outside := filepath.Join(in.home, "outside")
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+outside, "bs=1M", "count=1024").CombinedOutput(); err == nil {
		t.Fatalf("dd filling HOME from outside: no error\n%s", out)
	}
	dir := shortTempDir(t)
	r := in.run("mount", "ws", dir)
	if r.code == 0 {
		in.cleanupMount("ws", dir)
		t.Fatalf("mount on a disk without a free block succeeded")
	}
	oneLineOrOK(t, "cairn mount", r)
	if log := in.daemonLog("ws"); !strings.Contains(log, "no space left") && !strings.Contains(log, "disk full") {
		t.Fatalf("mount failed (%s), and the daemon's log does not say why:\n%s", strings.TrimSpace(r.stderr), log)
	}
	if strings.Contains(in.daemonLog("ws"), "goroutine") {
		t.Fatalf("the daemon's log has a crash:\n%s", in.daemonLog("ws"))
	}
	if err := os.Remove(outside); err != nil {
		t.Fatal(err)
	}

	// Mount again on the disk the workspace's own file fills: it works.
	r = in.run("mount", "ws", dir)
	if r.code != 0 {
		t.Fatalf("mount on a full disk failed: %s\ndaemon log:\n%s", strings.TrimSpace(r.stderr), in.daemonLog("ws"))
	}
	t.Cleanup(func() { in.cleanupMount("ws", dir) })
	if got, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || !bytes.Equal(got, keep) {
		t.Fatalf("read after mounting again: %d bytes, %v", len(got), err)
	}

	// Free space: writes and snapshots work again, without a remount.
	if err := os.Remove(filepath.Join(dir, "fill")); err != nil {
		t.Fatalf("remove the filler: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "after"), []byte("fine"), 0o644); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	in.must("snapshot", "ws", "-m", "after")
	in.must("unmount", "ws")
	if got := in.must("cat", "ws:after"); got != "fine" {
		t.Fatalf("cat ws:after = %q", got)
	}
	if got := in.must("cat", "ws:keep"); got != string(keep) {
		t.Fatalf("cat ws:keep: %d bytes", len(got))
	}
}

// daemonLog is the daemon's log of ws.
func (in *instance) daemonLog(ws string) string {
	b, _ := os.ReadFile(filepath.Join(in.home, "workspaces", ws, "daemon.log"))
	return string(b)
}

// With the store elsewhere, the journal itself refuses to open on a HOME
// without room for Badger: the mount fails in one line that says how much
// is free and needed, the daemon's log says it too, and the mount works
// once space is freed.
func TestDiskFull_MountRefused(t *testing.T) {
	in := fullHome(t, "256m", true)
	mnt := in.mount("ws")
	if err := os.WriteFile(filepath.Join(mnt, "keep"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Filling HOME through the mount spends the journal's reserve (its
	// release needs it), then fill the rest from outside.
	if out, err := exec.Command("dd", "if=/dev/urandom", "of="+filepath.Join(mnt, "fill"), "bs=1M", "count=1024").CombinedOutput(); err == nil {
		t.Fatalf("dd filling HOME: no error\n%s", out)
	}
	in.must("unmount", "ws")
	outside := filepath.Join(in.home, "outside")
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+outside, "bs=1M", "count=1024").CombinedOutput(); err == nil {
		t.Fatalf("dd filling HOME from outside: no error\n%s", out)
	}
	dir := shortTempDir(t)
	r := in.run("mount", "ws", dir)
	if r.code == 0 {
		in.cleanupMount("ws", dir)
		t.Fatal("mount on a disk without a free block succeeded")
	}
	oneLineOrOK(t, "cairn mount", r)
	if !strings.Contains(r.stderr, "no space left in "+in.home) || !strings.Contains(r.stderr, "the journal needs") {
		t.Fatalf("mount's error does not name HOME and what the journal needs: %s", r.stderr)
	}
	log := in.daemonLog("ws")
	if !strings.Contains(log, "no space left in "+in.home) || strings.Contains(log, "goroutine") {
		t.Fatalf("the daemon's log does not say why the mount failed:\n%s", log)
	}
	oneLineOrOK(t, "cairn snapshot (offline)", in.run("snapshot", "ws"))
	if err := os.Remove(outside); err != nil {
		t.Fatal(err)
	}
	in.mountAt("ws", dir)
	if got, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || string(got) != "kept" {
		t.Fatalf("read after mounting again: %q, %v", got, err)
	}
	if err := os.Remove(filepath.Join(dir, "fill")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "after"), []byte("fine"), 0o644); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	in.must("snapshot", "ws")
}
