package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/outbox"
	"github.com/cairnfs/cairn/daemon"
	"github.com/cairnfs/cairn/journal"
)

type snapshotOptions struct {
	globals
	Workspace string
	Request   daemon.SnapshotRequest
	JSON      bool
	Progress  io.Writer // where to show progress (a terminal); nil: none
}

func newSnapshotCommand() *cli.Command {
	return &cli.Command{
		Name:      "snapshot",
		Usage:     "snapshot a workspace (turn end); prints the snapshot's ID",
		ArgsUsage: "WORKSPACE",
		Description: `Commits every change since the last snapshot as a new, immutable snapshot
and moves the workspace's head to it. The kernel is flushed first, so every
write acknowledged before the command started is in it. The work is
O(changed): only changed files are chunked, only their directories get new
trees.

On a local store the command returns once the snapshot is in the store
and the workspace's head points at it ("done"). On a remote store (S3) a
mounted workspace commits the snapshot to local disk and uploads it in
the background, durably (it survives a crash, an outage and a restart);
the command says so on stderr, and "done" only once the upload finished
and the head moved. --wait waits for that; so does unmount.

A workspace that is not mounted but has a journal on this machine (its
daemon was stopped or killed) is snapshotted from its journal.

Examples:
   cairn snapshot agent-1 -m "turn 7" --label turn=7
   cairn snapshot --json agent-1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "the snapshot's message"},
			&cli.StringSliceFlag{Name: "label", Usage: "a label `K=V` (repeatable)"},
			&cli.BoolFlag{Name: "wait", Usage: "return once uploaded to a remote store and the head moved"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("snapshot takes WORKSPACE")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			labels, err := parseLabels(c.StringSlice("label"))
			if err != nil {
				return err
			}
			opts := snapshotOptions{globals: g, Workspace: c.Args().First(), JSON: c.Bool("json"),
				Request: daemon.SnapshotRequest{Message: c.String("message"), Labels: labels, Wait: c.Bool("wait")}}
			if !opts.JSON && isTerminal(os.Stderr) {
				opts.Progress = os.Stderr
			}
			return runSnapshot(c.Context, os.Stdout, opts)
		},
	}
}

func parseLabels(in []string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	for _, l := range in {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--label %q: want KEY=VALUE", l)}
		}
		out[k] = v
	}
	return out, nil
}

func runSnapshot(ctx context.Context, w io.Writer, opts snapshotOptions) error {
	if err := chunkstore.ValidWorkspaceName(opts.Workspace); err != nil {
		return err
	}
	var rep *daemon.SnapshotReply
	r, err := daemon.ReadRecord(opts.Home, opts.Workspace)
	switch {
	case err == nil && r.Alive():
		cl := daemon.NewClient(r.Socket)
		stop := watchProgress(opts.Progress, opts.Progress != nil, cl.Progress)
		rep, err = cl.Snapshot(ctx, opts.Request)
		stop()
	case err == nil || errors.Is(err, daemon.ErrNotMounted):
		rep, err = snapshotOffline(ctx, opts)
	}
	if err != nil {
		return err
	}
	if opts.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintln(w, rep.ID)
	if !rep.Done {
		fmt.Fprintf(os.Stderr, "snapshot %s is committed on this machine; its upload is queued (%d writes; cairn status shows them, cairn snapshot --wait waits)\n", rep.ID[:12], rep.PendingUploads)
	}
	return nil
}

// snapshotOffline snapshots an unmounted workspace from its journal.
func snapshotOffline(ctx context.Context, opts snapshotOptions) (*daemon.SnapshotReply, error) {
	p := daemon.PathsOf(opts.Home, opts.Workspace)
	if _, err := os.Stat(p.Journal); err != nil {
		return nil, fmt.Errorf("%w: workspace %q is not mounted and has no journal in %s; mount it first (cairn mount %s DIR)", chunkstore.ErrNotFound, opts.Workspace, opts.Home, opts.Workspace)
	}
	start := time.Now()
	store, ob, closeStore, err := openWorkspaceStore(ctx, opts.globals, opts.Workspace)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	releaseLease, err := takeLease(ctx, opts.globals, store, nil, opts.Workspace, "snapshot")
	if err != nil {
		return nil, err
	}
	defer releaseLease()
	host, _ := os.Hostname()
	j, err := journal.Open(ctx, journal.Config{Dir: p.Journal, Store: store, Workspace: opts.Workspace, Host: host, Version: version})
	if err != nil {
		return nil, fmt.Errorf("open the journal of %q: %w", opts.Workspace, err)
	}
	defer j.Close()
	stop := watchProgress(opts.Progress, opts.Progress != nil, func(context.Context) (journal.Progress, error) { return j.Progress(), nil })
	id, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: opts.Request.Message, Labels: opts.Request.Labels})
	stop()
	if err != nil {
		return nil, err
	}
	snap, err := store.Snapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	rep := &daemon.SnapshotReply{ID: id.String(), Seq: snap.Seq, Stats: snap.Stats, Done: true}
	if ob != nil { // no daemon uploads for it: this command does
		if err := ob.Wait(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "cairn: the upload of snapshot %s did not finish (%v); it stays queued for the next mount or snapshot\n", id.Short(), err)
		}
		p := ob.Pending()
		rep.Done, rep.PendingUploads = p.Entries == 0 && len(p.Lost) == 0, p.Entries
		recordLostRefs(ctx, store, ob)
	}
	rep.Millis = float64(time.Since(start).Microseconds()) / 1000
	return rep, nil
}

// openWorkspaceStore opens the store for a command that works on an
// unmounted workspace's journal here. A remote store goes through the
// workspace's outbox, as the daemon's does: what a daemon queued and did
// not upload is seen (and uploads on), and what this command writes is
// queued first (the caller waits for it: no daemon will).
func openWorkspaceStore(ctx context.Context, g globals, ws string) (*chunkstore.Store, *outbox.Backend, func(), error) {
	be, err := chunkstore.OpenBackend(ctx, g.Store, false)
	if err != nil {
		return nil, nil, nil, err
	}
	storeBe := be
	var ob *outbox.Backend
	if !be.Properties().Local {
		if ob, err = outbox.Open(be, daemon.PathsOf(g.Home, ws).Outbox, outbox.Options{}); err != nil {
			be.Close()
			return nil, nil, nil, err
		}
		storeBe = ob
	}
	st, err := chunkstore.Open(ctx, storeBe, g.storeOptions())
	if err != nil {
		if ob != nil {
			ob.Close()
		}
		be.Close()
		return nil, nil, nil, err
	}
	return st, ob, func() {
		st.Close()
		if ob != nil {
			ob.Close()
		}
		be.Close()
	}, nil
}

// openStore opens the store of g with the state directory's cache.
func openStore(ctx context.Context, g globals) (*chunkstore.Store, func(), error) {
	be, err := chunkstore.OpenBackend(ctx, g.Store, false)
	if err != nil {
		return nil, nil, err
	}
	st, err := chunkstore.Open(ctx, be, g.storeOptions())
	if err != nil {
		be.Close()
		return nil, nil, err
	}
	return st, func() { st.Close(); be.Close() }, nil
}
