package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/daemon"
	"github.com/cairnfs/cairn/journal"
)

// forkReply is `cairn fork --json`.
type forkReply struct {
	Workspace string `json:"workspace"`
	Snapshot  string `json:"snapshot"`
}

func newForkCommand() *cli.Command {
	return &cli.Command{
		Name:      "fork",
		Usage:     "make a new workspace that starts at a snapshot (O(1), no data copied)",
		ArgsUsage: "SNAP NEWWORKSPACE",
		Description: `The new workspace's head is SNAP: nothing is copied, and it can be mounted
at once, here or on any machine that reaches the store. The two workspaces
share every unchanged chunk and tree from then on.

Examples:
   cairn fork agent-1 agent-1-try2
   cairn fork agent-1@3 bisect && cairn mount bisect /mnt/bisect`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usageError{errors.New("fork takes SNAP NEWWORKSPACE")}
			}
			return storeAction(c, func(ctx context.Context, g globals, st *chunkstore.Store) error {
				return runFork(ctx, os.Stdout, g, st, c.Args().Get(0), c.Args().Get(1), c.Bool("json"))
			})
		},
	}
}

func runFork(ctx context.Context, w io.Writer, g globals, st *chunkstore.Store, ref, ws string, asJSON bool) error {
	if err := chunkstore.ValidWorkspaceName(ws); err != nil {
		return err
	}
	id, err := st.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	if _, err := st.Ref(ctx, ws); err == nil {
		return fmt.Errorf("%w: workspace %q exists; pick another name (cairn workspaces lists them)", chunkstore.ErrConflict, ws)
	}
	// A journal left here by an earlier workspace of that name would be
	// mounted instead of the fork.
	if _, err := os.Stat(daemon.PathsOf(g.Home, ws).Journal); err == nil {
		return fmt.Errorf("%w: workspace %q has a journal in %s already; pick another name", chunkstore.ErrConflict, ws, g.Home)
	}
	if _, err := st.SetRef(ctx, ws, id, nil); err != nil {
		if errors.Is(err, chunkstore.ErrConflict) {
			return fmt.Errorf("%w: workspace %q exists; pick another name (cairn workspaces lists them)", chunkstore.ErrConflict, ws)
		}
		return err
	}
	if asJSON {
		return writeJSON(w, forkReply{Workspace: ws, Snapshot: id.String()})
	}
	fmt.Fprintf(w, "forked %s as %s; mount it with: cairn mount %s DIR\n", id.Short(), ws, ws)
	return nil
}

func newRollbackCommand() *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "reset a workspace to a snapshot; the discarded state is snapshotted first",
		ArgsUsage: "WORKSPACE SNAP",
		Description: `Resets WORKSPACE (mounted or not) to SNAP and moves its head there. The
state it discards, changes not snapshotted included, is snapshotted first
and named in the output, so every rollback can be undone by rolling back to
that snapshot. O(1) apart from that snapshot: nothing is copied.

On a mounted workspace the kernel's caches are invalidated at once. While
files are open in it the rollback is refused, unless --force: then their
handles fail with ESTALE, and with EIO once their path is looked up again
(files the kernel reads and writes directly, by FUSE passthrough, keep the
old content until then or until closed; it is never written back). New
opens, listings and stat see the snapshot's state at once.

Examples:
   cairn rollback agent-1 agent-1@3
   cairn rollback --force agent-1 3fa9c2`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "roll back even while files are open (their handles get ESTALE)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usageError{errors.New("rollback takes WORKSPACE SNAP")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			return runRollback(c.Context, os.Stdout, g, c.Args().Get(0), c.Args().Get(1), c.Bool("force"), c.Bool("json"))
		},
	}
}

func runRollback(ctx context.Context, w io.Writer, g globals, ws, ref string, force, asJSON bool) error {
	if err := chunkstore.ValidWorkspaceName(ws); err != nil {
		return err
	}
	var rep *daemon.RollbackReply
	r, err := daemon.ReadRecord(g.Home, ws)
	switch {
	case err == nil && r.Alive():
		rep, err = daemon.NewClient(r.Socket).Rollback(ctx, daemon.RollbackRequest{To: ref, Force: force})
	case err == nil || errors.Is(err, daemon.ErrNotMounted):
		rep, err = rollbackOffline(ctx, g, ws, ref)
	}
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, rep)
	}
	to, _ := chunkstore.ParseID(rep.To)
	discarded, _ := chunkstore.ParseID(rep.Discarded)
	fmt.Fprintf(w, "rolled back %s to %s; the discarded state is snapshot %s (undo: cairn rollback %s %s)\n",
		ws, to.Short(), discarded.Short(), ws, discarded.Short())
	return nil
}

// rollbackOffline rolls back an unmounted workspace: through its journal
// if this machine has one, else by moving its ref (its head is then the
// discarded state: nothing else is live).
func rollbackOffline(ctx context.Context, g globals, ws, ref string) (*daemon.RollbackReply, error) {
	st, ob, closeStore, err := openWorkspaceStore(ctx, g, ws)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	to, err := st.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	releaseLease, err := takeLease(ctx, g, st, ob, ws, "rollback")
	if err != nil {
		return nil, err
	}
	defer releaseLease()
	p := daemon.PathsOf(g.Home, ws)
	if _, err := os.Stat(p.Journal); err == nil {
		host, _ := os.Hostname()
		// A rollback resets the journal, whatever the store's head is now:
		// no reconciling first (what it discards is snapshotted).
		j, err := journal.Open(ctx, journal.Config{Dir: p.Journal, Store: st, Workspace: ws, Host: host, Version: version, NoReconcile: true})
		if err != nil {
			return nil, fmt.Errorf("open the journal of %q: %w", ws, err)
		}
		defer j.Close()
		discarded, err := j.Rollback(ctx, to, false)
		if err != nil {
			return nil, err
		}
		return &daemon.RollbackReply{To: to.String(), Discarded: discarded.String()}, nil
	}
	head, err := st.Ref(ctx, ws)
	if err != nil {
		return nil, err
	}
	if _, err := st.SetRef(ctx, ws, to, &head); err != nil {
		return nil, err
	}
	if err := st.ForgetLost(ctx, ws, to); err != nil {
		fmt.Fprintf(os.Stderr, "cairn: %v\n", err)
	}
	return &daemon.RollbackReply{To: to.String(), Discarded: head.Snapshot.String()}, nil
}
