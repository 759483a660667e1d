package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/daemon"
	"github.com/cairnfs/cairn/journal"
)

func newRestoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "revert paths of a workspace to what they are in a snapshot",
		ArgsUsage: "SNAP PATH...",
		Description: `Makes each PATH of the workspace what it is in SNAP: a file gets its content
and metadata back, a directory its whole subtree (what the workspace has
there and SNAP has not is removed), a path SNAP does not have is removed.
Missing parent directories are created. Nothing is copied: restored files
share SNAP's chunks. Paths are relative to the workspace root (on a mounted
workspace, paths under its mount point work too).

The workspace is SNAP's own unless --to names another. The state before is
snapshotted first (unless nothing changed since the head) and named in the
output, so every restore can be undone. On a mounted workspace the restored
paths are live changes that the next snapshot records, and the kernel's
caches of them are dropped at once; open files keep their old content, as
after a rename over them. On an unmounted workspace the restore is
snapshotted at once.

Examples:
   cairn restore agent-1@3 src/main.go
   cairn restore agent-1@3 src docs/README.md
   cairn restore 3fa9c2 config.yaml --to agent-2`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "to", Usage: "the `WORKSPACE` to restore into (default: SNAP's)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usageError{errors.New("restore takes SNAP PATH [PATH]")}
			}
			return storeAction(c, func(ctx context.Context, g globals, st *chunkstore.Store) error {
				var prog io.Writer
				if !c.Bool("json") && isTerminal(os.Stderr) {
					prog = os.Stderr
				}
				return runRestore(ctx, os.Stdout, prog, g, st, c.Args().First(), c.Args().Tail(), c.String("to"), c.Bool("json"))
			})
		},
	}
}

func runRestore(ctx context.Context, w, prog io.Writer, g globals, st *chunkstore.Store, ref string, paths []string, ws string, asJSON bool) error {
	from, err := st.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	if ws == "" {
		snap, err := st.Snapshot(ctx, from)
		if err != nil {
			return err
		}
		ws = snap.Workspace
	}
	if err := chunkstore.ValidWorkspaceName(ws); err != nil {
		return err
	}
	var rep *daemon.RestoreReply
	r, err := daemon.ReadRecord(g.Home, ws)
	switch {
	case err == nil && r.Alive():
		cl := daemon.NewClient(r.Socket)
		stop := watchProgress(prog, prog != nil, cl.Progress)
		rep, err = cl.Restore(ctx, daemon.RestoreRequest{From: from.String(), Paths: underMount(paths, r.Dir)})
		stop()
	case err == nil || errors.Is(err, daemon.ErrNotMounted):
		rep, err = restoreOffline(ctx, prog, g, ws, from, paths)
	}
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, rep)
	}
	var restored, removed, all []string
	for _, p := range rep.Paths {
		all = append(all, quotePath(p.Path))
		if p.Removed {
			removed = append(removed, quotePath(p.Path))
		} else {
			restored = append(restored, quotePath(p.Path))
		}
	}
	before, _ := chunkstore.ParseID(rep.Before)
	msg := fmt.Sprintf("restored %s from %s", ws, from.Short())
	if len(restored) > 0 {
		msg += ": " + strings.Join(restored, " ")
	}
	if len(removed) > 0 {
		msg += "; removed (not in the snapshot): " + strings.Join(removed, " ")
	}
	fmt.Fprintln(w, msg)
	if rep.Snapshot != "" {
		id, _ := chunkstore.ParseID(rep.Snapshot)
		fmt.Fprintf(w, "snapshot %s\n", id.Short())
	}
	fmt.Fprintf(w, "the state before is snapshot %s (undo: cairn restore %s %s --to %s)\n", before.Short(), before.Short(), strings.Join(all, " "), ws)
	return nil
}

// underMount makes absolute paths under a workspace's mount point relative
// to its root; other paths are left as they are.
func underMount(paths []string, mnt string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = p
		if !filepath.IsAbs(p) || mnt == "" {
			continue
		}
		if rel, err := filepath.Rel(mnt, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			out[i] = rel
		}
	}
	return out
}

// restoreOffline restores into an unmounted workspace: through its journal
// on this machine, or a temporary one from its head, and snapshots the
// result (no daemon holds live changes for it).
func restoreOffline(ctx context.Context, prog io.Writer, g globals, ws string, from chunkstore.ID, paths []string) (*daemon.RestoreReply, error) {
	st, ob, closeStore, err := openWorkspaceStore(ctx, g, ws)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	releaseLease, err := takeLease(ctx, g, st, ob, ws, "restore")
	if err != nil {
		return nil, err
	}
	defer releaseLease()
	dir := daemon.PathsOf(g.Home, ws).Journal
	if _, err := os.Stat(dir); err != nil {
		if _, err := st.Ref(ctx, ws); err != nil {
			if errors.Is(err, chunkstore.ErrNotFound) {
				return nil, fmt.Errorf("%w: workspace %q does not exist (cairn workspaces lists them; cairn fork makes one)", chunkstore.ErrNotFound, ws)
			}
			return nil, err
		}
		if err := os.MkdirAll(g.Home, 0o700); err != nil {
			return nil, err
		}
		tmp, err := os.MkdirTemp(g.Home, "restore-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	host, _ := os.Hostname()
	j, err := journal.Open(ctx, journal.Config{Dir: dir, Store: st, Workspace: ws, Host: host, Version: version})
	if err != nil {
		return nil, fmt.Errorf("open the journal of %q: %w", ws, err)
	}
	defer j.Close()
	stop := watchProgress(prog, prog != nil, func(context.Context) (journal.Progress, error) { return j.Progress(), nil })
	defer stop()
	res, err := j.Restore(ctx, from, paths)
	if err != nil {
		return nil, err
	}
	id, err := j.Snapshot(ctx, journal.SnapshotOptions{
		Message: fmt.Sprintf("restore of %s from %s", strings.Join(paths, " "), from.Short()),
		Labels:  map[string]string{"cairn.restore": from.String()},
	})
	if err != nil {
		return nil, fmt.Errorf("restored, but the snapshot of the result failed: %w", err)
	}
	return &daemon.RestoreReply{From: from.String(), Before: res.Before.String(), Paths: res.Paths, Snapshot: id.String()}, nil
}
