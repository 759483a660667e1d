package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/daemon"
	"github.com/cairnfs/cairn/internal/snapio"
)

type importOptions struct {
	globals
	Workspace string
	Source    string    // a directory, a tar archive, or "-" (a tar archive on Stdin)
	Stdin     io.Reader // for Source "-"
	Exclude   []string
	Message   string
	JSON      bool
	Progress  bool // show a progress line on stderr
}

func newImportCommand() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "create a workspace from a directory or a tar archive",
		ArgsUsage: "WORKSPACE DIR|FILE.tar|-",
		Description: `Creates WORKSPACE, which must not exist yet, with one snapshot holding the
tree of DIR or of a tar archive (plain, gzip or zstd; - reads it from
stdin). Nothing is mounted: the snapshot is built in the store, and
` + "`cairn mount WORKSPACE DIR`" + ` then shows exactly that tree.

Everything is kept: modes with setuid/setgid/sticky, owners, times in
nanoseconds (ctime too: from the source's stat, or a tar's PAX ctime
records), xattrs, hardlinks (names of one inode in DIR; link entries in a
tar), symlinks, FIFOs and devices (importing those from a directory needs
no special rights, reading other users' files does), empty directories,
the root's own attributes, and holes (SEEK_DATA/SEEK_HOLE in DIR, GNU
sparse entries in a tar). Inode numbers are new (1 is the root).

--exclude PATTERN (repeatable; path.Match syntax) leaves out every path
whose relative path or base name matches, with its subtree; each one is
listed in the snapshot record (and printed), never dropped silently.

Prints the snapshot's ID; --json prints the ID, stats and exclusions.

Examples:
   cairn import agent-1 ./repo --exclude .git --exclude '*.pyc'
   cairn import restored agent-1.tar -m "restored from backup"
   cairn export agent-1 | cairn import agent-1-copy -
   curl -s https://example.com/seed.tar.zst | cairn import seed - --json`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "exclude", Usage: "leave out paths matching `PATTERN` (repeatable)"},
			&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "the snapshot's message"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usageError{errors.New("import takes WORKSPACE and a DIR, FILE.tar or - (stdin)")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			return runImport(c.Context, os.Stdout, os.Stderr, importOptions{
				globals: g, Workspace: c.Args().Get(0), Source: c.Args().Get(1), Stdin: os.Stdin,
				Exclude: c.StringSlice("exclude"), Message: c.String("message"), JSON: c.Bool("json"),
				Progress: !c.Bool("json") && isTerminal(os.Stderr),
			})
		},
	}
}

// importReply is what `cairn import --json` prints.
type importReply struct {
	ID        string                   `json:"id"`
	Workspace string                   `json:"workspace"`
	Seq       uint64                   `json:"seq"`
	Stats     chunkstore.SnapshotStats `json:"stats"`
	Excluded  []chunkstore.Exclusion   `json:"excluded,omitempty"`
	Millis    float64                  `json:"millis"`
}

func runImport(ctx context.Context, stdout, stderr io.Writer, opts importOptions) error {
	start := time.Now()
	if err := chunkstore.ValidWorkspaceName(opts.Workspace); err != nil {
		return err
	}
	// A workspace mounted on this machine but never snapshotted has a
	// journal and no ref: its next mount would open the journal, not the
	// import.
	if p := daemon.PathsOf(opts.Home, opts.Workspace); fileExists(p.Journal) {
		return fmt.Errorf("%w: workspace %q has a journal on this machine (%s): it was mounted here and never snapshotted; snapshot it, or import into another name",
			chunkstore.ErrConflict, opts.Workspace, p.Journal)
	}
	var dir bool
	source := opts.Source
	if source != "-" {
		fi, err := os.Stat(source)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: import source %s does not exist", chunkstore.ErrNotFound, source)
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return usageError{fmt.Errorf("import source %s is neither a directory nor a tar archive", source)}
		}
		dir = fi.IsDir()
		if abs, err := filepath.Abs(source); err == nil {
			source = abs
		}
	}
	store, closeStore, err := openStore(ctx, opts.globals)
	if err != nil {
		return err
	}
	defer closeStore()
	p := newProgress(stderr, opts.Progress, "importing")
	host, _ := os.Hostname()
	iopts := snapio.ImportOptions{Workspace: opts.Workspace, Message: opts.Message, Exclude: opts.Exclude,
		Host: host, Version: version, Progress: p.fn()}
	var id chunkstore.ID
	var snap *chunkstore.Snapshot
	switch {
	case dir:
		id, snap, err = snapio.ImportDir(ctx, store, source, iopts)
	case source == "-":
		id, snap, err = snapio.ImportTar(ctx, store, opts.Stdin, "stdin", iopts)
	default:
		var f *os.File
		if f, err = os.Open(source); err != nil {
			return err
		}
		defer f.Close()
		id, snap, err = snapio.ImportTar(ctx, store, f, source, iopts)
	}
	p.clear()
	if err != nil {
		return fmt.Errorf("import into %s: %w", opts.Workspace, err)
	}
	if opts.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(importReply{ID: id.String(), Workspace: snap.Workspace, Seq: snap.Seq, Stats: snap.Stats,
			Excluded: snap.Excluded, Millis: float64(time.Since(start).Microseconds()) / 1000})
	}
	for _, x := range snap.Excluded {
		fmt.Fprintf(stderr, "cairn: excluded %s (%s)\n", x.Path, x.Reason)
	}
	fmt.Fprintln(stdout, id)
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
