package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/daemon"
)

func newUnmountCommand() *cli.Command {
	return &cli.Command{
		Name:      "unmount",
		Aliases:   []string{"umount"},
		Usage:     "flush a mounted workspace and stop its daemon",
		ArgsUsage: "DIR|WORKSPACE",
		Description: `Asks the daemon serving DIR (or WORKSPACE) to flush, unmount and exit, and
waits until it has. A workspace on a remote store (S3) first finishes
uploading its snapshots (the mount keeps serving meanwhile); --no-wait
leaves them queued on local disk, to upload at the next mount. A mount
whose daemon is gone (killed) is cleaned up:
unmounted and its record removed; its journal stays, and the next mount
continues from it.

Examples:
   cairn unmount /workspace
   cairn unmount agent-1
   cairn unmount --no-wait agent-1     S3 is down: leave the uploads queued`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "no-wait", Usage: "do not wait for uploads to a remote store; they stay queued for the next mount"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("unmount takes DIR or WORKSPACE")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			return runUnmount(c.Context, g, c.Args().First(), c.Bool("no-wait"))
		},
	}
}

func runUnmount(ctx context.Context, g globals, what string, noWait bool) error {
	r, err := daemon.FindRecord(g.Home, what)
	if errors.Is(err, daemon.ErrNotMounted) {
		// No record here: a stale cairn mount (of another state dir, or
		// whose record is gone) is still cleaned up.
		if st, serr := os.Stat(what); errors.Is(serr, syscall.ENOTCONN) || serr == nil && st.IsDir() && daemon.IsCairnMount(absPath(what)) {
			if err := daemon.CleanStale(g.Home, nil, absPath(what)); err != nil {
				return err
			}
			fmt.Printf("unmounted %s (no daemon of this state directory served it)\n", what)
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if !r.Alive() {
		return cleanStale(ctx, g, r, "was gone")
	}
	cl := daemon.NewClient(r.Socket)
	if !noWait {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if st, err := cl.Status(sctx); err == nil && st.Uploads != nil && st.Uploads.Pending > 0 {
			msg := fmt.Sprintf("cairn: waiting for %d uploads to the store (%s)", st.Uploads.Pending, bytesString(uint64(st.Uploads.Bytes)))
			if st.Uploads.Failing != "" {
				msg += "; they fail at the moment: " + st.Uploads.Failing
			}
			fmt.Fprintln(os.Stderr, msg+"; interrupt to stop waiting (the workspace stays mounted), or unmount --no-wait to leave them queued for the next mount")
		}
		cancel()
	}
	err = cl.Unmount(ctx, daemon.UnmountRequest{NoWait: noWait})
	if ctx.Err() != nil { // interrupted while the daemon drains its uploads: it serves on
		return fmt.Errorf("interrupted: %s is still mounted at %s and serving; its uploads continue (cairn unmount --no-wait %s leaves them queued)", r.Workspace, r.Dir, r.Workspace)
	}
	if errors.Is(err, daemon.ErrStale) {
		// The process is there but does not answer: a daemon stuck or
		// being killed. Clean up what it left.
		return cleanStale(ctx, g, r, "did not answer")
	} else if err != nil {
		return err
	}
	return waitExit(ctx, g, r)
}

// unmountExitLimit bounds how long unmount waits for a daemon to exit once
// it has been asked to: it closes its journal (bounded by the daemon at 2
// minutes), drains its uploads for up to 30 s and releases its lease.
const unmountExitLimit = 3 * time.Minute

// waitExit waits until the daemon of r has exited (its process and its
// lock of the workspace gone), for at most unmountExitLimit or until ctx
// is done (SIGINT, SIGTERM), and says in what state it left things.
func waitExit(ctx context.Context, g globals, r *daemon.Record) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(unmountExitLimit)
	defer limit.Stop()
	log := daemon.PathsOf(g.Home, r.Workspace).Log
	state := func() string {
		if daemon.IsCairnMount(r.Dir) {
			return fmt.Sprintf("%s is still mounted at %s, being unmounted", r.Workspace, r.Dir)
		}
		return fmt.Sprintf("%s is detached from %s", r.Workspace, r.Dir)
	}
	for r.Alive() || daemon.Locked(g.Home, r.Workspace) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %s; its daemon (pid %d) is still flushing its journal and exits by itself (see %s)", state(), r.PID, log)
		case <-limit.C:
			return fmt.Errorf("%w: %s, but its daemon (pid %d) has not exited after %v; see %s", daemon.ErrBusy, state(), r.PID, unmountExitLimit, log)
		case <-tick.C:
		}
	}
	fmt.Printf("unmounted %s from %s\n", r.Workspace, r.Dir)
	return nil
}

// cleanStale cleans up the mount of r, whose daemon is gone or does not
// answer (how: "was gone"), and waits a little for a killed daemon's
// process to end: one stuck in the kernel on its own mount ends once its
// connection is aborted.
func cleanStale(ctx context.Context, g globals, r *daemon.Record, how string) error {
	if err := daemon.CleanStale(g.Home, r, ""); err != nil {
		return err
	}
	what := fmt.Sprintf("of %s at %s (its daemon, pid %d, %s; the journal is kept)", r.Workspace, r.Dir, r.PID, how)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for daemon.Locked(g.Home, r.Workspace) {
		select {
		case <-wctx.Done():
			fmt.Printf("cleaned up the stale mount %s; its process has not ended yet, so the workspace cannot be mounted again until it has\n", what)
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Printf("cleaned up the stale mount %s\n", what)
	return nil
}

func absPath(p string) string {
	if a, err := absolute(p); err == nil {
		return a
	}
	return p
}
