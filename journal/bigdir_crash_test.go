package journal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/journal"
)

// The child of TestCrash_BigDir gets its mode, store and journal directory
// in these variables.
const (
	bigCrashChildEnv = "CAIRN_BIGDIR_CRASH_CHILD" // "load" or "snap"
	bigCrashStoreEnv = "CAIRN_BIGDIR_CRASH_STORE"
	bigCrashDirEnv   = "CAIRN_BIGDIR_CRASH_DIR"
	bigCrashFiles    = 2500 // of 4,000 bytes: 10 MB inline, several transactions
)

// TestCrash_BigDir kills a process (SIGKILL) while it loads a directory of
// many small files in several transactions, or while it snapshots a turn
// that created them (the records updated after the ref moved), then
// reopens its journal: the directory lists and reads whole, the snapshot
// (if its ref moved) is the base and stays in the history, and the next
// snapshot succeeds.
func TestCrash_BigDir(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	storeDir := t.TempDir()
	be, err := local.Open(storeDir, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chunkstore.Init(ctx, be, chunkstore.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	openStore := func() *chunkstore.Store {
		t.Helper()
		be, err := local.Open(storeDir, local.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := chunkstore.Open(ctx, be, chunkstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	var want map[string][]byte
	{
		st := openStore()
		j, err := journal.Open(ctx, journal.Config{Dir: t.TempDir(), Store: st, Workspace: "ws"})
		if err != nil {
			t.Fatal(err)
		}
		_, want = fillDir(t, j, "d", bigCrashFiles, 4000)
		if _, err := j.Snapshot(ctx, journal.SnapshotOptions{}); err != nil {
			t.Fatal(err)
		}
		j.Close()
	}

	t.Run("Load", func(t *testing.T) {
		// How long a whole load takes; kills land within it.
		_, took := killChild(t, "load", storeDir, t.TempDir(), -1)
		cut := 0
		for cycle := range 4 {
			dir := t.TempDir()
			// Up to three kills in a row: each child resumes the load
			// the one before left.
			for range 1 + rng.Intn(3) {
				if done, _ := killChild(t, "load", storeDir, dir, time.Duration(rng.Int63n(int64(took)))); !done {
					cut++
				}
			}
			st := openStore()
			j, err := journal.Open(ctx, journal.Config{Dir: dir, Store: st, Workspace: "ws"})
			if err != nil {
				t.Fatalf("cycle %d: reopen: %v", cycle, err)
			}
			checkDir(t, j, "d", want)
			if _, err := j.Snapshot(ctx, journal.SnapshotOptions{}); err != nil {
				t.Fatalf("cycle %d: snapshot after the reopen: %v", cycle, err)
			}
			j.Close()
		}
		t.Logf("a load takes %v; %d loads killed before they finished", took, cut)
	})

	t.Run("Snapshot", func(t *testing.T) {
		// How long a whole snapshot takes; kills land in its second
		// half, where the ref moves and the records are updated.
		_, took := killChild(t, "snap:calibrate", storeDir, t.TempDir(), -1)
		for cycle := range 5 {
			ws := fmt.Sprintf("snap%d", cycle)
			dir := t.TempDir()
			done, _ := killChild(t, "snap:"+ws, storeDir, dir, took/2+time.Duration(rng.Int63n(int64(took/2+1))))
			st := openStore()
			ref, err := st.Ref(ctx, ws)
			moved := err == nil
			if err != nil && !errors.Is(err, chunkstore.ErrNotFound) {
				t.Fatal(err)
			}
			j, err := journal.Open(ctx, journal.Config{Dir: dir, Store: st, Workspace: ws})
			if err != nil {
				t.Fatalf("cycle %d: reopen: %v", cycle, err)
			}
			if moved && j.Base() != ref.Snapshot {
				t.Fatalf("cycle %d: the ref moved to %s but the base is %s", cycle, ref.Snapshot.Short(), j.Base().Short())
			}
			checkDir(t, j, "d", want)
			id, err := j.Snapshot(ctx, journal.SnapshotOptions{})
			if err != nil {
				t.Fatalf("cycle %d: snapshot after the reopen: %v", cycle, err)
			}
			j.Close()
			var hist []chunkstore.ID
			if err := st.History(ctx, id, 0, func(id chunkstore.ID, _ *chunkstore.Snapshot) error {
				hist = append(hist, id)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			wantHist := []chunkstore.ID{id}
			if moved && ref.Snapshot != id {
				wantHist = append(wantHist, ref.Snapshot)
			}
			if !slices.Equal(hist, wantHist) {
				t.Fatalf("cycle %d: history %v, want %v", cycle, hist, wantHist)
			}
			fresh, err := journal.Open(ctx, journal.Config{Dir: t.TempDir(), Store: st, Workspace: ws})
			if err != nil {
				t.Fatal(err)
			}
			checkDir(t, fresh, "d", want)
			fresh.Close()
			t.Logf("cycle %d: a snapshot takes %v; the ref moved before the kill: %v, the snapshot returned: %v", cycle, took, moved, done)
		}
	})
}

// killChild starts the child in mode, waits until it is ready, and kills
// it killAfter later (negative: once it is done). It returns whether the
// child had finished its work (a load, a snapshot) when killed, and how
// long that took.
func killChild(t *testing.T, mode, store, dir string, killAfter time.Duration) (bool, time.Duration) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var out bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash_BigDirChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), bigCrashChildEnv+"="+mode, bigCrashStoreEnv+"="+store, bigCrashDirEnv+"="+dir)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		pw.Close()
		t.Fatal(err)
	}
	pw.Close()
	defer func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}()
	// The child writes 'r' when ready and 'd' when done.
	events := make(chan time.Time, 2)
	go func() {
		var b [1]byte
		for {
			if n, _ := pr.Read(b[:]); n != 1 {
				close(events)
				return
			}
			events <- time.Now()
		}
	}()
	readyAt, ok := <-events
	if !ok {
		cmd.Wait()
		t.Fatalf("the child exited before it was ready:\n%s", out.String())
	}
	var doneAt time.Time
	if killAfter < 0 {
		select {
		case doneAt, ok = <-events:
			if !ok {
				cmd.Wait()
				t.Fatalf("the child exited before it was done:\n%s", out.String())
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("the child is not done after 2 minutes")
		}
	} else {
		time.Sleep(killAfter)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the child exited by itself (%v):\n%s", err, out.String())
	}
	if doneAt.IsZero() {
		select {
		case doneAt = <-events: // zero if the pipe closed first
		case <-time.After(time.Second):
		}
	}
	if doneAt.IsZero() {
		return false, 0
	}
	return true, doneAt.Sub(readyAt)
}

// TestCrash_BigDirChild is the child process of TestCrash_BigDir; it does
// nothing unless started by it.
func TestCrash_BigDirChild(t *testing.T) {
	mode := os.Getenv(bigCrashChildEnv)
	if mode == "" {
		t.Skip("the child process of TestCrash_BigDir")
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "big dir crash child: "+format+"\n", args...)
		os.Exit(3)
	}
	ctx := context.Background()
	ws := "ws"
	if mode != "load" {
		ws = mode[len("snap:"):]
	}
	j := childJournal(os.Getenv(bigCrashStoreEnv), os.Getenv(bigCrashDirEnv), ws, fail)
	if mode != "load" {
		// The turn: the same files as the parent's /d, created here.
		c := journal.Caller{UID: 1000, GID: 1000}
		d, err := j.Mkdir(ctx, c, journal.RootIno, "d", 0o755)
		if err != nil {
			fail("mkdir: %v", err)
		}
		for i := range bigCrashFiles {
			f, err := j.Create(ctx, c, d.Ino, fmt.Sprintf("f%05d", i), 0o644)
			if err == nil {
				_, err = j.Write(ctx, c, f.Ino, bigContent(i, 4000), 0)
			}
			if err != nil {
				fail("create: %v", err)
			}
		}
	}
	events := os.NewFile(3, "events")
	events.Write([]byte{'r'})
	if mode == "load" {
		d, err := j.Lookup(ctx, journal.RootIno, "d")
		if err == nil {
			_, err = j.ReadDir(ctx, d.Ino)
		}
		if err != nil {
			fail("load: %v", err)
		}
	} else if _, err := j.Snapshot(ctx, journal.SnapshotOptions{}); err != nil {
		fail("snapshot: %v", err)
	}
	events.Write([]byte{'d'})
	time.Sleep(time.Hour) // until killed
	os.Exit(0)
}
