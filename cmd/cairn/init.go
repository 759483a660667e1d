package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
)

type initOptions struct {
	globals
	JSON bool
	Init chunkstore.InitOptions
}

func newInitCommand() *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "create a store",
		ArgsUsage: " ",
		Description: `Creates a store: a local directory (the default, HOME/store) or an S3 bucket
prefix. The store gets a random hash key and fixed chunking parameters, kept
in its config object. A second init of the same location fails.

Examples:
   cairn init
   cairn --store /srv/cairn init
   cairn --store 's3://bucket/team-a?endpoint=http://127.0.0.1:7070&region=us-east-1' init`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the new store's config as JSON"},
			&cli.IntFlag{Name: "compression-level", Usage: "zstd level 1 (fastest) to 4 (smallest); -1 stores blobs uncompressed", Value: chunkstore.DefaultCompressionLevel},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usageError{fmt.Errorf("init takes no arguments (the store comes from --store)")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			return runInit(c.Context, os.Stdout, initOptions{
				globals: g, JSON: c.Bool("json"),
				Init: chunkstore.InitOptions{CompressionLevel: c.Int("compression-level")},
			})
		},
	}
}

func runInit(ctx context.Context, w io.Writer, opts initOptions) error {
	be, err := chunkstore.OpenBackend(ctx, opts.Store, true)
	if err != nil {
		return err
	}
	defer be.Close()
	cfg, err := chunkstore.Init(ctx, be, opts.Init)
	if err != nil {
		return err
	}
	if opts.JSON {
		public := *cfg
		public.HashKey = "" // never print the key
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(public)
	}
	comp := cfg.Compression.Algorithm
	if comp == "zstd" {
		comp = fmt.Sprintf("zstd level %d", cfg.Compression.Level)
	}
	fmt.Fprintf(w, "created cairn store %s at %s\n  chunks %d/%d/%d KiB (min/avg/max), %s, packs of %d MiB\n",
		cfg.ID, be.Properties().Location, cfg.Chunker.Min>>10, cfg.Chunker.Avg>>10, cfg.Chunker.Max>>10, comp, cfg.PackSize>>20)
	return nil
}
