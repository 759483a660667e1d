package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/internal/snapio"
)

type exportOptions struct {
	globals
	Snap     string
	Output   string // a file; "" or "-": stdout
	Progress bool   // show a progress line on stderr
}

func newExportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a snapshot as a tar archive",
		ArgsUsage: "SNAP",
		Description: `Writes snapshot SNAP (a workspace for its head, WORKSPACE@N, or a unique
snapshot ID prefix) as a tar archive (PAX format), read straight from the
store: the workspace need not be mounted. The archive keeps everything:
modes with setuid/setgid/sticky, numeric owners, times in nanoseconds,
xattrs (SCHILY.xattr records), hardlinks, symlinks, FIFOs, devices, empty
directories, the root's own attributes (the "./" entry), and holes: sparse
files are written in GNU sparse format 1.0, so a 1 TiB file with a few
writes takes a few KiB, and GNU tar extracts it sparse. Sockets cannot go
into a tar archive; they are left out with a warning. Entries are in tree
order, so the same snapshot always gives the same bytes.

Without -o (or with -o -) the archive goes to stdout. A file is written
under a temporary name and renamed when complete.

Examples:
   cairn export agent-1 -o agent-1.tar
   cairn export agent-1@3 | tar -tvf -
   cairn export 3fa2c1 -o - | zstd > turn.tar.zst
   sudo tar --xattrs --xattrs-include='*' -xpf agent-1.tar -C /restore`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the archive to `FILE` (- for stdout, the default)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("export takes SNAP (and -o FILE)")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			opts := exportOptions{globals: g, Snap: c.Args().First(), Output: c.String("output"), Progress: isTerminal(os.Stderr)}
			if (opts.Output == "" || opts.Output == "-") && isTerminal(os.Stdout) {
				return usageError{errors.New("refusing to write a tar archive to a terminal: give -o FILE, or redirect stdout")}
			}
			return runExport(c.Context, os.Stdout, os.Stderr, opts)
		},
	}
}

func runExport(ctx context.Context, stdout, stderr io.Writer, opts exportOptions) error {
	store, closeStore, err := openStore(ctx, opts.globals)
	if err != nil {
		return err
	}
	defer closeStore()
	id, err := store.Resolve(ctx, opts.Snap)
	if err != nil {
		return err
	}
	var out io.Writer = stdout
	var file *output
	if opts.Output != "" && opts.Output != "-" {
		if file, err = createOutput(opts.Output); err != nil {
			return err
		}
		defer file.abort()
		out = file.f
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	p := newProgress(stderr, opts.Progress, "exporting")
	stats, err := snapio.Export(ctx, store, id, bw, snapio.ExportOptions{
		Progress: p.fn(),
		Warn:     func(msg string) { p.clear(); fmt.Fprintf(stderr, "cairn: warning: %s\n", msg) },
	})
	p.clear()
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("export %s: %w", opts.Snap, err)
	}
	if file != nil {
		if err := file.commit(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "exported snapshot %s to %s: %d entries, %s\n", id.Short(), opts.Output, stats.Entries, bytesString(stats.Bytes))
	}
	return nil
}

// output is the archive file: a temporary file next to a regular (or new)
// path, renamed into place by commit; other files (devices, FIFOs) are
// written directly.
type output struct {
	f         *os.File
	path, tmp string
	done      bool
}

func createOutput(path string) (*output, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, usageError{fmt.Errorf("-o %s is a directory; give a file name", path)}
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		return &output{f: f, path: path}, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &output{f: f, path: path, tmp: f.Name()}, nil
}

// commit makes the archive durable and puts it in place.
func (o *output) commit() error {
	var err error
	if o.tmp != "" {
		if err = o.f.Chmod(0o644); err == nil {
			err = o.f.Sync()
		}
	}
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err == nil && o.tmp != "" {
		err = os.Rename(o.tmp, o.path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", o.path, err)
	}
	o.done = true
	return nil
}

// abort removes an archive that was not committed.
func (o *output) abort() {
	if o.done {
		return
	}
	o.f.Close()
	if o.tmp != "" {
		os.Remove(o.tmp)
	}
}

// progress prints a one-line counter on a terminal, at most ten times a
// second. A nil *progress prints nothing.
type progress struct {
	w     io.Writer
	verb  string
	last  time.Time
	shown bool
}

func newProgress(w io.Writer, on bool, verb string) *progress {
	if !on {
		return nil
	}
	return &progress{w: w, verb: verb}
}

// fn returns the callback for snapio's options (nil when off).
func (p *progress) fn() func(snapio.Progress) {
	if p == nil {
		return nil
	}
	return func(s snapio.Progress) {
		now := time.Now()
		if now.Sub(p.last) < 100*time.Millisecond {
			return
		}
		p.last, p.shown = now, true
		fmt.Fprintf(p.w, "\r\x1b[K%s: %d entries, %s", p.verb, s.Entries, bytesString(s.Bytes))
	}
}

// clear erases the progress line, if one is shown.
func (p *progress) clear() {
	if p != nil && p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// isTerminal reports whether f is a terminal (a character device).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
