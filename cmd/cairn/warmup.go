package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
)

// warmupReply is `cairn warmup --json`.
type warmupReply struct {
	Snapshot string  `json:"snapshot"`
	Path     string  `json:"path,omitempty"`
	Bytes    uint64  `json:"bytes"` // plaintext bytes now in the local cache
	Seconds  float64 `json:"seconds"`
}

func newWarmupCommand() *cli.Command {
	return &cli.Command{
		Name:      "warmup",
		Usage:     "fetch a snapshot (or a path in it) from a remote store into the local cache",
		ArgsUsage: "SNAP[:PATH]",
		Description: `A workspace resumed on a machine with an empty cache fetches lazily: trees
on first lookup, file data on first read. warmup fetches a whole snapshot,
or one directory or file of it, ahead of time, with coalesced, parallel
ranged GETs, into the cache that mounts on this machine (same --home) read
from. Trees come first, then file data. What does not fit in --cache-size
is not fetched, and the command says so. A local store needs no warm-up.

Examples:
   cairn warmup agent-1                 the workspace's head
   cairn warmup agent-1:node_modules
   cairn --cache-size 50G warmup agent-1@7`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("warmup takes SNAP[:PATH]")}
			}
			return storeAction(c, func(ctx context.Context, g globals, st *chunkstore.Store) error {
				return runWarmup(ctx, os.Stdout, os.Stderr, st, c.Args().First(), c.Bool("json"))
			})
		},
	}
}

func runWarmup(ctx context.Context, w, errw io.Writer, st *chunkstore.Store, arg string, asJSON bool) error {
	id, e, err := lookupSnapPath(ctx, st, arg)
	if err != nil {
		return err
	}
	_, path := splitSnapPath(arg)
	start := time.Now()
	show := !asJSON && isTerminal(os.Stderr)
	var done uint64
	var last time.Time
	progress := func(d, total uint64) {
		done = d
		if show && time.Since(last) > 100*time.Millisecond {
			last = time.Now()
			fmt.Fprintf(errw, "\r\x1b[Kwarming up: %s of %s", bytesString(d), bytesString(total))
		}
	}
	switch e.Type {
	case chunkstore.TypeDir:
		err = st.Warmup(ctx, e.Subtree, progress)
	case chunkstore.TypeRegular: // read it once: its chunks land in the cache
		var r *chunkstore.FileReader
		if r, err = st.OpenFile(ctx, e.Content()); err == nil {
			_, err = r.WriteTo(io.Discard)
			done = e.Size
		}
	}
	if show && !last.IsZero() {
		fmt.Fprint(errw, "\r\x1b[K")
	}
	if err != nil {
		return err
	}
	rep := warmupReply{Snapshot: id.String(), Path: path, Bytes: done, Seconds: time.Since(start).Seconds()}
	if asJSON {
		return writeJSON(w, rep)
	}
	fmt.Fprintf(w, "warmed up %s of snapshot %s in %.1f s\n", bytesString(done), id.Short(), rep.Seconds)
	return nil
}
