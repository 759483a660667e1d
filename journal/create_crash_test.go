package journal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/journal"
)

// The child of TestCrash_CreateOpen gets its store and journal directory in
// these variables.
const (
	createCrashStoreEnv = "CAIRN_CREATE_CRASH_STORE"
	createCrashDirEnv   = "CAIRN_CREATE_CRASH_DIR"
	createCrashWSEnv    = "CAIRN_CREATE_CRASH_WS"
)

// createCrashContent is what the child writes to file i through its
// backing file, as the kernel writes a passthrough file.
func createCrashContent(i int) string { return "content of file " + strconv.Itoa(i) + "\n" }

// TestCrash_CreateOpen kills a process (SIGKILL) that creates files with
// CreateOpen (FUSE_CREATE), writes each through its backing file, as the
// kernel does with passthrough, changes the mode of some (SETATTR) and
// releases half of them, reporting each file once done. After a reopen,
// every reported file is there with its bytes and mode, whether it was
// released or still open; the one in flight is absent, empty or whole; no
// other file exists; and the journal snapshots.
func TestCrash_CreateOpen(t *testing.T) {
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
	for cycle := range 4 {
		dir := t.TempDir()
		ws := fmt.Sprintf("ws%d", cycle)
		acked := runCreateCrashChild(t, storeDir, dir, ws, 1+rng.Intn(300))
		be, err := local.Open(storeDir, local.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := chunkstore.Open(ctx, be, chunkstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		j, err := journal.Open(ctx, journal.Config{Dir: dir, Store: st, Workspace: ws})
		if err != nil {
			t.Fatalf("cycle %d: reopen after %d files: %v", cycle, acked, err)
		}
		entries, err := j.ReadDir(ctx, journal.RootIno)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) < acked || len(entries) > acked+1 {
			t.Fatalf("cycle %d: %d files after %d were reported", cycle, len(entries), acked)
		}
		for i := range len(entries) {
			a, err := j.Lookup(ctx, journal.RootIno, "f"+strconv.Itoa(i))
			if err != nil {
				t.Fatalf("cycle %d: file %d of %d reported: %v", cycle, i, acked, err)
			}
			got := string(readAll(t, j, a.Ino))
			want := createCrashContent(i)
			if i == acked { // in flight: made or not, written or not
				if got != "" && got != want {
					t.Fatalf("cycle %d: file %d in flight holds %q", cycle, i, got)
				}
				continue
			}
			if got != want {
				t.Fatalf("cycle %d: file %d holds %q, want %q", cycle, i, got, want)
			}
			if wantMode := createCrashMode(i); a.Mode != wantMode {
				t.Fatalf("cycle %d: file %d has mode %o, want %o", cycle, i, a.Mode, wantMode)
			}
		}
		if s, err := j.Status(ctx); err != nil || s.OpenFiles != 0 {
			t.Fatalf("cycle %d: status after reopen: %+v, %v", cycle, s, err)
		}
		if _, err := j.Snapshot(ctx, journal.SnapshotOptions{}); err != nil {
			t.Fatalf("cycle %d: snapshot after the reopen: %v", cycle, err)
		}
		j.Close()
		st.Close()
		t.Logf("cycle %d: killed after %d files", cycle, acked)
	}
}

// createCrashMode is the mode file i ends with: every third is chmod'ed.
func createCrashMode(i int) uint32 {
	if i%3 == 0 {
		return 0o600
	}
	return 0o644
}

// runCreateCrashChild starts the child, kills it once it reported at least
// n files, and returns how many it reported.
func runCreateCrashChild(t *testing.T, store, dir, ws string, n int) int {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var out bytes.Buffer // read after Wait only
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash_CreateOpenChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), createCrashStoreEnv+"="+store, createCrashDirEnv+"="+dir, createCrashWSEnv+"="+ws)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		pw.Close()
		t.Fatal(err)
	}
	pw.Close()
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
		}
	}()
	// One byte per file done.
	buf := make([]byte, n)
	if _, err := io.ReadFull(pr, buf); err != nil {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		killed = true
		t.Fatalf("the child stopped before %d files: %v\n%s", n, err, out.String())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	killed = true
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the child exited by itself (%v):\n%s", err, out.String())
	}
	// What it reported before it died (the write end is closed now).
	rest, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	return n + len(rest)
}

// TestCrash_CreateOpenChild is the child process of TestCrash_CreateOpen;
// it does nothing unless started by it.
func TestCrash_CreateOpenChild(t *testing.T) {
	dir := os.Getenv(createCrashDirEnv)
	if dir == "" {
		t.Skip("the child process of TestCrash_CreateOpen")
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "create crash child: "+format+"\n", args...)
		os.Exit(3)
	}
	ctx := context.Background()
	j := childJournal(os.Getenv(createCrashStoreEnv), dir, os.Getenv(createCrashWSEnv), fail)
	events := os.NewFile(3, "events")
	for i := 0; ; i++ {
		a, h, err := j.CreateOpen(ctx, journal.Root, journal.RootIno, "f"+strconv.Itoa(i), 0o644, true, true)
		if err != nil {
			fail("create %d: %v", i, err)
		}
		bf := h.Backing()
		if bf == nil {
			fail("create %d: no backing file", i)
		}
		if _, err := bf.WriteAt([]byte(createCrashContent(i)), 0); err != nil {
			fail("write %d: %v", i, err)
		}
		if m := createCrashMode(i); m != 0o644 {
			if _, err := j.SetAttr(ctx, journal.Root, a.Ino, journal.SetAttrIn{Valid: journal.SetMode, Mode: m}); err != nil {
				fail("chmod %d: %v", i, err)
			}
		}
		if i%2 == 0 {
			if err := j.Release(ctx, h); err != nil {
				fail("release %d: %v", i, err)
			}
		}
		if _, err := events.Write([]byte{'.'}); err != nil {
			os.Exit(0) // the parent is gone
		}
	}
}
