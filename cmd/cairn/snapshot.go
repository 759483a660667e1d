package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
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
trees. The command returns once the snapshot is durable in the store
(--wait is accepted and is what it always does).

A workspace that is not mounted but has a journal on this machine (its
daemon was stopped or killed) is snapshotted from its journal.

Examples:
   cairn snapshot agent-1 -m "turn 7" --label turn=7
   cairn snapshot --json agent-1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "the snapshot's message"},
			&cli.StringSliceFlag{Name: "label", Usage: "a label `K=V` (repeatable)"},
			&cli.BoolFlag{Name: "wait", Usage: "return once durable in the store (always the case)"},
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
				Request: daemon.SnapshotRequest{Message: c.String("message"), Labels: labels}}
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
	return nil
}

// snapshotOffline snapshots an unmounted workspace from its journal.
func snapshotOffline(ctx context.Context, opts snapshotOptions) (*daemon.SnapshotReply, error) {
	p := daemon.PathsOf(opts.Home, opts.Workspace)
	if _, err := os.Stat(p.Journal); err != nil {
		return nil, fmt.Errorf("%w: workspace %q is not mounted and has no journal in %s; mount it first (cairn mount %s DIR)", chunkstore.ErrNotFound, opts.Workspace, opts.Home, opts.Workspace)
	}
	start := time.Now()
	store, closeStore, err := openStore(ctx, opts.globals)
	if err != nil {
		return nil, err
	}
	defer closeStore()
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
	return &daemon.SnapshotReply{ID: id.String(), Seq: snap.Seq, Stats: snap.Stats, Millis: float64(time.Since(start).Microseconds()) / 1000}, nil
}

// openStore opens the store of g with the state directory's cache.
func openStore(ctx context.Context, g globals) (*chunkstore.Store, func(), error) {
	be, err := chunkstore.OpenBackend(ctx, g.Store, false)
	if err != nil {
		return nil, nil, err
	}
	st, err := chunkstore.Open(ctx, be, chunkstore.Options{CacheDir: filepath.Join(g.Home, "cache")})
	if err != nil {
		be.Close()
		return nil, nil, err
	}
	return st, func() { st.Close(); be.Close() }, nil
}
