package fs

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/internal/testenv"
	"github.com/cairnfs/cairn/journal"
)

// blockingLookup is a FS whose LOOKUP of "block" waits until the kernel
// interrupts it (or gives up after a while), and says which it was.
type blockingLookup struct {
	*FS
	entered     chan struct{}
	interrupted chan bool
}

// blockFor is how long a blocked LOOKUP waits for its INTERRUPT before it
// gives up (and the test fails): long enough for any machine.
const blockFor = 30 * time.Second

func (b *blockingLookup) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if name != "block" {
		return b.FS.Lookup(cancel, h, name, out)
	}
	b.entered <- struct{}{}
	select {
	case <-cancel:
		b.interrupted <- true
		return fuse.EINTR
	case <-time.After(blockFor):
		b.interrupted <- false
		return fuse.ENOENT
	}
}

// A request blocked in the daemon is interrupted when its caller gets a
// signal, over /dev/fuse and over io_uring alike: the INTERRUPT, which
// the kernel always sends over /dev/fuse, reaches the request the ring
// serves, whose handler sees its cancel channel closed, and the caller
// ends.
func TestTransport_Interrupt(t *testing.T) {
	for _, transport := range []Transport{TransportDev, TransportURing} {
		t.Run(string(transport), func(t *testing.T) {
			testenv.NeedRoot(t, "FUSE mounts", true)
			if transport == TransportURing {
				testenv.NeedFUSEURing(t)
			}
			st := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
			j, err := journal.Open(context.Background(), journal.Config{Dir: t.TempDir(), Store: st, Workspace: "ws"})
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Transport: transport}
			b := &blockingLookup{FS: New(j, opts), entered: make(chan struct{}, 1), interrupted: make(chan bool, 1)}
			dir, srv := mountRaw(t, b, b.FS.opts, j)
			if want := map[Transport]string{TransportDev: TransportNameDev, TransportURing: TransportNameURing}[transport]; srv.Transport() != want {
				t.Fatalf("transport %s, want %s", srv.Transport(), want)
			}
			before := srv.RingRequests()

			cmd := exec.Command("stat", filepath.Join(dir, "block"))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-b.entered:
			case err := <-exited:
				t.Fatalf("stat ended before its LOOKUP blocked: %v", err)
			case <-time.After(blockFor):
				_ = cmd.Process.Kill()
				t.Fatal("the LOOKUP of block never reached the daemon")
			}
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if !<-b.interrupted {
				t.Errorf("the blocked LOOKUP was not interrupted in %v", blockFor)
			}
			err = <-exited
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
				t.Errorf("stat ended with %v, want killed by SIGINT", err)
			}
			if transport == TransportURing && srv.RingRequests() == before {
				t.Errorf("the blocked LOOKUP did not come through the ring")
			}
			// The mount still serves.
			if _, err := exec.Command("stat", dir).CombinedOutput(); err != nil {
				t.Errorf("stat of the mount after the interrupt: %v", err)
			}
		})
	}
}
