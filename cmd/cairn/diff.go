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

// diffStat sums a diff.
type diffStat struct {
	Added        int    `json:"added"`
	Modified     int    `json:"modified"`
	Removed      int    `json:"removed"`
	MetadataOnly int    `json:"metadata_only"`
	Bytes        uint64 `json:"bytes"` // sizes of added and modified files
}

// diffReply is `cairn diff --json`.
type diffReply struct {
	From    string              `json:"from"`
	To      string              `json:"to"` // a snapshot ID, or "live:WORKSPACE"
	Stat    diffStat            `json:"stat"`
	Changes []chunkstore.Change `json:"changes,omitempty"`
}

func newDiffCommand() *cli.Command {
	return &cli.Command{
		Name:      "diff",
		Usage:     "list the paths that differ between two snapshots, or a snapshot and the live workspace",
		ArgsUsage: "SNAP [SNAP]",
		Description: `Lists paths added (A), modified (M), removed (D) and changed in metadata
only (m: mode, owner, xattrs, link count). Without a second SNAP the other
side is the live state of SNAP's workspace (mounted, or its journal on this
machine; else its head). Equal subtrees are skipped unread: the work is
O(changed), not O(workspace).

Examples:
   cairn diff agent-1@3 agent-1
   cairn diff agent-1          what changed since the last snapshot
   cairn diff --stat --json agent-1@1 agent-1@2`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "stat", Usage: "print only the counts"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() < 1 || c.NArg() > 2 {
				return usageError{errors.New("diff takes SNAP [SNAP]")}
			}
			return storeAction(c, func(ctx context.Context, g globals, st *chunkstore.Store) error {
				return runDiff(ctx, os.Stdout, os.Stderr, g, st, c.Args().Slice(), c.Bool("stat"), c.Bool("json"))
			})
		},
	}
}

func runDiff(ctx context.Context, w, errw io.Writer, g globals, st *chunkstore.Store, refs []string, statOnly, asJSON bool) error {
	fromID, err := st.Resolve(ctx, refs[0])
	if err != nil {
		return err
	}
	from, err := st.Snapshot(ctx, fromID)
	if err != nil {
		return err
	}
	rep := diffReply{From: fromID.String()}
	var toRoot chunkstore.ID
	if len(refs) == 2 {
		toID, err := st.Resolve(ctx, refs[1])
		if err != nil {
			return err
		}
		to, err := st.Snapshot(ctx, toID)
		if err != nil {
			return err
		}
		rep.To, toRoot = toID.String(), to.Root
	} else {
		rep.To = "live:" + from.Workspace
		if toRoot, err = liveTree(ctx, errw, g, st, from.Workspace); err != nil {
			return err
		}
	}
	changes, err := st.Diff(ctx, from.Root, toRoot)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		switch ch.Op {
		case chunkstore.ChangeAdded:
			rep.Stat.Added++
			rep.Stat.Bytes += ch.Size
		case chunkstore.ChangeModified:
			rep.Stat.Modified++
			rep.Stat.Bytes += ch.Size
		case chunkstore.ChangeRemoved:
			rep.Stat.Removed++
		case chunkstore.ChangeMetadataOnly:
			rep.Stat.MetadataOnly++
		}
	}
	if !statOnly {
		rep.Changes = changes
	}
	if asJSON {
		return writeJSON(w, rep)
	}
	for _, ch := range rep.Changes {
		fmt.Fprintf(w, "%s %s\n", changeMark(ch.Op), quotePath(ch.Path))
	}
	if statOnly {
		s := rep.Stat
		fmt.Fprintf(w, "%d added, %d modified, %d removed, %d metadata only; %s in added and modified files\n",
			s.Added, s.Modified, s.Removed, s.MetadataOnly, bytesString(s.Bytes))
	}
	return nil
}

// liveTree returns the root tree of a workspace's live state: from its
// daemon, from its journal here, or (neither) its head's.
func liveTree(ctx context.Context, errw io.Writer, g globals, st *chunkstore.Store, ws string) (chunkstore.ID, error) {
	if r, err := daemon.ReadRecord(g.Home, ws); err == nil && r.Alive() {
		rep, err := daemon.NewClient(r.Socket).LiveTree(ctx)
		if err != nil {
			return chunkstore.ID{}, err
		}
		return chunkstore.ParseID(rep.Root)
	}
	p := daemon.PathsOf(g.Home, ws)
	if _, err := os.Stat(p.Journal); err == nil {
		j, err := journal.Open(ctx, journal.Config{Dir: p.Journal, Store: st, Workspace: ws, Version: version, NoReconcile: true})
		if err != nil {
			return chunkstore.ID{}, fmt.Errorf("open the journal of %q: %w", ws, err)
		}
		defer j.Close()
		return j.LiveTree(ctx)
	}
	head, err := st.Ref(ctx, ws)
	if err != nil {
		return chunkstore.ID{}, err
	}
	snap, err := st.Snapshot(ctx, head.Snapshot)
	if err != nil {
		return chunkstore.ID{}, err
	}
	fmt.Fprintf(errw, "cairn: %s is not mounted and has no journal here: comparing with its head %s\n", ws, head.Snapshot.Short())
	return snap.Root, nil
}
