package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
)

// repairReply is `cairn repair index --json`.
type repairReply struct {
	DryRun      bool         `json:"dry_run"`
	IndexFiles  int          `json:"index_files"`
	Corrupt     []string     `json:"corrupt"`   // index files that failed verification
	Packs       int          `json:"packs"`     // packs in the store
	Unindexed   []string     `json:"unindexed"` // packs no valid index file lists
	Blobs       int          `json:"blobs"`     // blobs in those packs
	BadPacks    []repairPack `json:"bad_packs"` // packs whose trailer does not verify: left alone
	Written     string       `json:"written,omitempty"`
	Quarantined []string     `json:"quarantined"`
}

type repairPack struct {
	Pack  string `json:"pack"`
	Error string `json:"error"`
}

func newRepairCommand() *cli.Command {
	return &cli.Command{
		Name:      "repair",
		Usage:     "rebuild a damaged store index from the packs",
		ArgsUsage: "index",
		Description: `repair index finds index files that are corrupt (they no longer match their
name) and packs that no valid index file lists, re-reads those packs'
trailers (each checked against the pack's ID), and writes a new index file
for them. Once that is durable, and every pack is indexed again, the corrupt
index files are moved under quarantine/ in the store. It only adds index
files and never touches a pack, so it is safe while workspaces of the store
are mounted elsewhere; running it again changes nothing. A pack whose
trailer does not verify is left alone and named (exit code 5): its blobs
cannot be read.

Examples:
   cairn repair index --dry-run
   cairn repair index`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "say what would be done; change nothing"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 || c.Args().First() != "index" {
				return usageError{errors.New("repair takes what to repair: index (cairn repair index)")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			be, err := chunkstore.OpenBackend(c.Context, g.Store, false)
			if err != nil {
				return err
			}
			defer be.Close()
			opts := g.storeOptions()
			opts.Logf = nil // the report names the corrupt index files
			st, err := chunkstore.Open(c.Context, be, opts)
			if err != nil {
				return err
			}
			defer st.Close()
			return runRepairIndex(c.Context, os.Stdout, st, c.Bool("dry-run"), c.Bool("json"))
		},
	}
}

func runRepairIndex(ctx context.Context, w io.Writer, st *chunkstore.Store, dryRun, asJSON bool) error {
	rep, err := st.RepairIndex(ctx, chunkstore.RepairOptions{DryRun: dryRun})
	if rep == nil {
		return err
	}
	reply := repairReply{DryRun: dryRun, IndexFiles: rep.IndexFiles, Packs: rep.Packs, Blobs: rep.Blobs,
		Corrupt: ids(rep.Corrupt), Unindexed: ids(rep.Unindexed), Quarantined: ids(rep.Quarantined), BadPacks: []repairPack{}}
	if !rep.Written.IsZero() {
		reply.Written = rep.Written.String()
	}
	for _, p := range rep.BadPacks {
		reply.BadPacks = append(reply.BadPacks, repairPack{p.ID.String(), p.Err.Error()})
	}
	if asJSON {
		if jerr := writeJSON(w, reply); jerr != nil && err == nil {
			err = jerr
		}
	} else {
		printRepair(w, rep, dryRun)
	}
	if err != nil {
		return err
	}
	if len(rep.BadPacks) > 0 {
		return fmt.Errorf("%w: %d pack(s) do not verify and could not be re-indexed, such as %s; their blobs cannot be read (restore the pack objects from a backup of the store)", chunkstore.ErrCorrupt, len(rep.BadPacks), rep.BadPacks[0].ID)
	}
	return nil
}

func ids(in []chunkstore.ID) []string {
	out := make([]string, 0, len(in))
	for _, id := range in {
		out = append(out, id.String())
	}
	return out
}

func printRepair(w io.Writer, rep *chunkstore.RepairReport, dryRun bool) {
	fmt.Fprintf(w, "index files: %d, of them corrupt: %d\n", rep.IndexFiles, len(rep.Corrupt))
	for _, id := range rep.Corrupt {
		fmt.Fprintf(w, "  corrupt: index/%s\n", id)
	}
	fmt.Fprintf(w, "packs: %d, not listed by a valid index file: %d (%d blobs)\n", rep.Packs, len(rep.Unindexed), rep.Blobs)
	for _, p := range rep.BadPacks {
		fmt.Fprintf(w, "  pack %s does not verify, left alone: %v\n", p.ID, p.Err)
	}
	switch {
	case len(rep.Corrupt) == 0 && len(rep.Unindexed) == 0:
		fmt.Fprintln(w, "the index is whole: nothing to do")
	case dryRun:
		if len(rep.Unindexed) > 0 {
			fmt.Fprintf(w, "would write an index file for %d pack(s) (%d blobs)\n", len(rep.Unindexed), rep.Blobs)
		}
		if len(rep.Corrupt) > 0 && len(rep.BadPacks) == 0 {
			fmt.Fprintf(w, "would then move %d corrupt index file(s) under quarantine/\n", len(rep.Corrupt))
		}
	default:
		if !rep.Written.IsZero() {
			fmt.Fprintf(w, "wrote index/%s for %d pack(s) (%d blobs)\n", rep.Written, len(rep.Unindexed), rep.Blobs)
		}
		for _, id := range rep.Quarantined {
			fmt.Fprintf(w, "moved corrupt index/%s to quarantine/index/%s\n", id, id)
		}
	}
}
