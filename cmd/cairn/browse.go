package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
)

// splitSnapPath splits SNAP[:PATH].
func splitSnapPath(arg string) (ref, path string) {
	ref, path, _ = strings.Cut(arg, ":")
	return ref, path
}

// lookupSnapPath resolves SNAP[:PATH] to its entry.
func lookupSnapPath(ctx context.Context, st *chunkstore.Store, arg string) (chunkstore.ID, *chunkstore.Entry, error) {
	ref, path := splitSnapPath(arg)
	id, err := st.Resolve(ctx, ref)
	if err != nil {
		return id, nil, err
	}
	snap, err := st.Snapshot(ctx, id)
	if err != nil {
		return id, nil, err
	}
	e, err := st.Lookup(ctx, snap.Root, path)
	if err != nil {
		return id, nil, fmt.Errorf("%s in snapshot %s (%s@%d): %w", path, id.Short(), snap.Workspace, snap.Seq, err)
	}
	if path == "" || strings.Trim(path, "/") == "" {
		ra := snap.RootAttr
		e.Mode, e.UID, e.GID, e.Atime, e.Mtime, e.Ctime = ra.Mode, ra.UID, ra.GID, ra.Atime, ra.Mtime, ra.Ctime
	}
	return id, e, nil
}

// lsEntry is one line of `cairn ls --json`.
type lsEntry struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"`
	Mode   string    `json:"mode"` // octal, with setuid/setgid/sticky
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Size   uint64    `json:"size"`
	Nlink  uint32    `json:"nlink"`
	Ino    uint64    `json:"ino"`
	Mtime  time.Time `json:"mtime"`
	Target string    `json:"target,omitempty"`
}

func newLsCommand() *cli.Command {
	return &cli.Command{
		Name:      "ls",
		Usage:     "list a directory of a snapshot, without mounting it",
		ArgsUsage: "SNAP[:PATH]",
		Description: `Examples:
   cairn ls agent-1              the root of agent-1's head
   cairn ls -l agent-1@3:src/pkg
   cairn ls --json 3fa9c2:README.md`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "l", Usage: "long format: mode, links, owner, size, time"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("ls takes SNAP[:PATH]")}
			}
			return storeAction(c, func(ctx context.Context, _ globals, st *chunkstore.Store) error {
				return runLs(ctx, os.Stdout, st, c.Args().First(), c.Bool("l"), c.Bool("json"))
			})
		},
	}
}

func runLs(ctx context.Context, w io.Writer, st *chunkstore.Store, arg string, long, asJSON bool) error {
	_, e, err := lookupSnapPath(ctx, st, arg)
	if err != nil {
		return err
	}
	entries := []chunkstore.Entry{*e}
	if e.Type == chunkstore.TypeDir {
		t, err := st.Tree(ctx, e.Subtree)
		if err != nil {
			return err
		}
		entries = t.Entries
	}
	out := make([]lsEntry, 0, len(entries))
	for i := range entries {
		x := &entries[i]
		out = append(out, lsEntry{Name: x.Name, Type: x.Type.String(), Mode: fmt.Sprintf("%04o", x.Mode), UID: x.UID, GID: x.GID,
			Size: x.Size, Nlink: x.Nlink, Ino: x.Ino, Mtime: time.Unix(0, x.Mtime).UTC(), Target: x.Target})
	}
	if asJSON {
		return writeJSON(w, out)
	}
	if !long {
		for _, x := range out {
			name := quotePath(x.Name)
			if x.Type == chunkstore.TypeDir.String() {
				name += "/"
			}
			fmt.Fprintln(w, name)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	for i, x := range out {
		name := quotePath(x.Name)
		if x.Target != "" {
			name += " -> " + quotePath(x.Target)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", modeString(&entries[i]), x.Nlink, x.UID, x.GID, x.Size,
			x.Mtime.Local().Format("2006-01-02 15:04"), name)
	}
	return tw.Flush()
}

// modeString is ls -l's mode column: drwxr-sr-t and the like.
func modeString(e *chunkstore.Entry) string {
	b := []byte("?rwxrwxrwx")
	if int(e.Type) < len(typeChars) {
		b[0] = typeChars[e.Type]
	}
	for i := range 9 {
		if e.Mode&(1<<(8-i)) == 0 {
			b[1+i] = '-'
		}
	}
	special := func(bit uint32, pos int, set, unset byte) {
		if e.Mode&bit != 0 {
			if b[pos] == '-' {
				b[pos] = unset
			} else {
				b[pos] = set
			}
		}
	}
	special(0o4000, 3, 's', 'S')
	special(0o2000, 6, 's', 'S')
	special(0o1000, 9, 't', 'T')
	return string(b)
}

// typeChars are ls's type letters, by chunkstore.EntryType.
var typeChars = [...]byte{chunkstore.TypeRegular: '-', chunkstore.TypeDir: 'd', chunkstore.TypeSymlink: 'l',
	chunkstore.TypeFIFO: 'p', chunkstore.TypeSocket: 's', chunkstore.TypeCharDev: 'c', chunkstore.TypeBlockDev: 'b'}

func newCatCommand() *cli.Command {
	return &cli.Command{
		Name:      "cat",
		Usage:     "print a file of a snapshot, without mounting it",
		ArgsUsage: "SNAP:PATH",
		Description: `Every chunk is verified against its ID on the way out.

Examples:
   cairn cat agent-1:README.md
   cairn cat agent-1@3:src/main.go > main.go.old`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 || !strings.Contains(c.Args().First(), ":") {
				return usageError{errors.New("cat takes SNAP:PATH")}
			}
			return storeAction(c, func(ctx context.Context, _ globals, st *chunkstore.Store) error {
				return runCat(ctx, os.Stdout, st, c.Args().First())
			})
		},
	}
}

func runCat(ctx context.Context, w io.Writer, st *chunkstore.Store, arg string) error {
	_, e, err := lookupSnapPath(ctx, st, arg)
	if err != nil {
		return err
	}
	_, path := splitSnapPath(arg)
	switch e.Type {
	case chunkstore.TypeRegular:
	case chunkstore.TypeDir:
		return usageError{fmt.Errorf("%s is a directory; list it with cairn ls", path)}
	default:
		return usageError{fmt.Errorf("%s is a %s, not a regular file", path, e.Type)}
	}
	if e.Inline != nil {
		_, err := w.Write(e.Inline)
		return err
	}
	r, err := st.OpenFile(ctx, e.Content())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, err := r.WriteTo(w); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
